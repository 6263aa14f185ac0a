// Start-up of every executable: a CNI VERSION call timed against the bare start of
// the runtime it embeds (`node -e 0`), peak RSS, size; Debian's Go plugins beside them.
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { alternate, alternateCpu, mb, median, mib, ms, peakRssKiB, ratio, table } from './lib/measure.mjs';

export const title = 'VERSION call vs bare runtime start (target <= 1.15x), peak RSS (target <= 70 MiB)';
export const order = 10;

const GO_PLUGINS = ['bridge', 'macvlan', 'host-local'].map((n) => `/usr/lib/cni/${n}`);

/** A CNI VERSION call as a runtime makes it: env, config on stdin, no node on PATH. */
const versionCall = (file, argv0) => ({
  file,
  argv0,
  env: { CNI_COMMAND: 'VERSION', PATH: '/nonexistent' },
  input: '{"cniVersion":"1.1.0"}',
});

export function run(ctx) {
  const bare = { file: ctx.node, args: ['-e', '0'], env: {} };
  const subjects = [];
  // CNI plugins only: the multi-call executable holds exactly those (`cnikit --list`); daemons
  // (coild, terwayd, operators) answer no CNI_COMMAND. Every build fixture is a plugin.
  const mc = path.join(ctx.binDir, 'cnikit');
  const plugins = new Set(fs.existsSync(mc) ? multicallPrograms(mc) : []);
  const binExes = ctx.executables(ctx.binDir);
  const daemons = binExes.filter((f) => path.basename(f) !== 'cnikit' && !plugins.has(path.basename(f)));
  const exes = [...binExes.filter((f) => !daemons.includes(f)), ...ctx.executables(ctx.fixturesDir)];
  if (exes.length === 0) ctx.skip(`no executables in ${ctx.binDir} or ${ctx.fixturesDir} (npm run build)`);
  if (daemons.length) console.log(`  not CNI plugins, left out: ${daemons.map((f) => path.basename(f)).join(' ')}`);
  const linkDir = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-mc-'));
  try {
    for (const file of exes) {
      const label = path.relative(ctx.root, file);
      const target = path.dirname(file) === ctx.binDir; // issue 10's VERSION target: the shipped plugins
      if (path.basename(file) !== 'cnikit') {
        subjects.push({ label, target, size: fs.statSync(file).size, cmd: versionCall(file) });
        continue;
      }
      // The multi-call executable answers as the program it is named after: call it
      // through a symlink, as an install's hard links do (same argv0 dispatch).
      // As veth when it holds it (issue 10's plugin), so the row compares with dist/bin/veth.
      const names = multicallPrograms(file);
      const first = names.includes('veth') ? 'veth' : names[0];
      if (!first) continue;
      const link = path.join(linkDir, first);
      fs.symlinkSync(file, link);
      subjects.push({ label: `${label} as ${first}`, target, size: fs.statSync(file).size, cmd: versionCall(link) });
    }
    for (const go of GO_PLUGINS.filter((f) => fs.existsSync(f))) {
      subjects.push({ label: `${go} (Go)`, size: fs.statSync(go).size, cmd: versionCall(go) });
    }
    const rows = [];
    const loads = [];
    for (const s of subjects) {
      const r = alternate(s.cmd, bare, ctx.runs);
      if (s.target)
        ctx.targets.push({ what: `VERSION ${path.basename(s.label)}`, limit: 1.15, wall: r, cpu: alternateCpu(s.cmd, bare, ctx.runs) });
      rows.push([s.label, mb(s.size), ms(median(r.a)), ms(median(r.b)), ratio(median(r.ratios)), mib(peakRssKiB(s.cmd))]);
      console.log(`  ${s.label}: pair ratios ${r.ratios.map((x) => x.toFixed(2)).join(' ')}`);
      if (!s.label.endsWith('(Go)')) loads.push(`  ${s.label}: ${builtinsLoaded(s.cmd)}`);
    }
    console.log('');
    table(['executable', 'size', 'VERSION', 'node -e 0', 'median ratio', 'peak RSS'], rows);
    console.log(`  (medians of ${ctx.runs} alternating pairs; node -e 0 peak RSS ${mib(peakRssKiB(bare))})`);
    console.log("\n  Node modules a VERSION call loads beyond the runtime's own start (each costs start-up; require them where used):");
    loads.forEach((l) => console.log(l));
  } finally {
    fs.rmSync(linkDir, { recursive: true, force: true });
  }
}

/** What CNIKIT_STARTUP_REPORT (tools/build/runtime/launcher.ts) says the call loaded. */
function builtinsLoaded(cmd) {
  const r = spawnSync(cmd.file, [], {
    env: { ...cmd.env, CNIKIT_STARTUP_REPORT: '1' },
    input: cmd.input,
    argv0: cmd.argv0,
    encoding: 'utf8',
  });
  return /startup: loaded (.*)/.exec(r.stderr)?.[1] ?? 'unknown (built before CNIKIT_STARTUP_REPORT existed?)';
}

/** Program names inside a multi-call executable (`cnikit --list`). */
export function multicallPrograms(file) {
  return spawnSync(file, ['--list'], { encoding: 'utf8', env: {} }).stdout.split('\n').filter(Boolean);
}
