// Installed footprint: every plugin as its own executable vs the multi-call install
// (one runtime + a hard link per plugin name), measured by installing both ways
// into a temp dir with tools/install-plugins.mjs. Target (issue 10): all plugins in
// multicall mode <= 1.2x one executable.
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { mb, ratio, table } from './lib/measure.mjs';
import { multicallPrograms } from './startup.mjs';

export const title = 'install size: separate executables vs multi-call (target: multicall <= 1.2x one executable)';
export const order = 20;

function install(ctx, from, prefix, mode) {
  const r = spawnSync(ctx.node, [path.join(ctx.root, 'tools', 'install-plugins.mjs'), '--from', from, '--prefix', prefix, '--mode', mode], {
    encoding: 'utf8',
  });
  if (r.status !== 0) throw new Error(`install-plugins --mode ${mode}: ${r.stderr}`);
  return Number(/([\d.]+) MB on disk/.exec(r.stdout)?.[1]) * 1e6;
}

export function run(ctx) {
  const rows = [];
  for (const from of [ctx.binDir, ctx.fixturesDir]) {
    const exes = ctx.executables(from).map((f) => path.basename(f));
    if (!exes.includes('cnikit')) {
      console.log(`  ${path.relative(ctx.root, from)}: no multi-call executable, skipped`);
      continue;
    }
    // What install-plugins installs: the CNI plugins the multi-call executable holds (daemons
    // in dist/bin are deployed as containers and stay out of it).
    const held = new Set(multicallPrograms(path.join(from, 'cnikit')));
    const plugins = exes.filter((n) => held.has(n));
    const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'bench-footprint-'));
    try {
      const separate = install(ctx, from, path.join(tmp, 'separate'), 'separate');
      const multicall = install(ctx, from, path.join(tmp, 'multicall'), 'multicall');
      const one = Math.max(...plugins.map((p) => fs.statSync(path.join(tmp, 'separate', p)).blocks * 512));
      const label = `${path.relative(ctx.root, from)} (${plugins.length} plugins)`;
      rows.push([label, mb(one), mb(separate), ratio(separate / one), mb(multicall), ratio(multicall / one)]);
    } finally {
      fs.rmSync(tmp, { recursive: true, force: true });
    }
  }
  if (rows.length) table(['build', 'one executable', 'separate install', 'x one', 'multicall install', 'x one'], rows);
}
