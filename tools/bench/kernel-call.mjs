// Calls that load native code, with the build fixtures (node tools/build/sea.mjs
// --fixtures): fx-netlink dumps links through the netlink package; fx-netlib runs a
// CNI ADD through netlib (setns into a netns, link dump there). Both against the bare
// runtime start, like startup.mjs. The addon cache is a temp dir, warmed first.
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { alternate, median, mib, ms, peakRssKiB, ratio, table } from './lib/measure.mjs';

export const title = 'calls that load the netlink binding and the netns addon (build fixtures)';
export const order = 15;

export function run(ctx) {
  const exe = (n) => path.join(ctx.fixturesDir, n);
  if (!fs.existsSync(exe('fx-netlib'))) return ctx.skip(`no fixtures in ${ctx.fixturesDir} (node tools/build/sea.mjs --fixtures)`);
  if (process.getuid?.() !== 0) return ctx.skip('needs root (network namespace)');
  const ns = `cnikit-bench-kc-${process.pid}`;
  const cache = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-addon-cache-'));
  spawnSync('ip', ['netns', 'add', ns]);
  try {
    const base = { PATH: '/nonexistent', CNIKIT_CACHE_DIR: cache };
    const calls = {
      'fx-netlink LINKS': { file: exe('fx-netlink'), env: { ...base, CNI_COMMAND: 'LINKS' } },
      'fx-netlib ADD (netns + link dump)': {
        file: exe('fx-netlib'),
        env: {
          ...base,
          CNI_COMMAND: 'ADD',
          CNI_CONTAINERID: 'bench',
          CNI_NETNS: `/var/run/netns/${ns}`,
          CNI_IFNAME: 'eth0',
          CNI_PATH: '/nonexistent',
        },
        input: JSON.stringify({ cniVersion: '1.1.0', name: 'bench', type: 'fx-netlib' }),
      },
    };
    const bare = { file: ctx.node, args: ['-e', '0'], env: {} };
    const rows = Object.entries(calls).map(([label, cmd]) => {
      const r = alternate(cmd, bare, ctx.runs);
      return [label, ms(median(r.a)), ms(median(r.b)), ratio(median(r.ratios)), mib(peakRssKiB(cmd))];
    });
    table(['call', 'median', 'node -e 0', 'median ratio', 'peak RSS'], rows);
  } finally {
    spawnSync('ip', ['netns', 'del', ns]);
    fs.rmSync(cache, { recursive: true, force: true });
  }
}
