// Runs tools/node-lab/pod-bench.ts (real nodes; root) with `args` (and `env` added) under the bench's Node, and
// returns the JSON object it prints last. Shared by the node-pods modules.
import { spawnSync } from 'node:child_process';
import * as path from 'node:path';
import { mib, table, verdict } from './measure.mjs';

export function podBench(ctx, args, env = {}) {
  const script = path.join(ctx.root, 'tools', 'node-lab', 'pod-bench.ts');
  const r = spawnSync(ctx.node, ['--disable-warning=MODULE_TYPELESS_PACKAGE_JSON', script, ...args], {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'inherit'],
    env: { ...process.env, ...env, CNIKIT_REPO_ROOT: ctx.root },
    timeout: 1_800_000,
  });
  if (r.status !== 0) throw new Error(`pod-bench exited ${r.status}: ${r.stdout}`);
  return JSON.parse(r.stdout.trim().split('\n').pop());
}

/**
 * The issue-18 rows of node daemons measured in their pods: [name, {idleKiB, anonKiB, peakKiB}], idle against
 * 80 MiB, with the anonymous part of it (RssAnon) beside: the rest is the executable's pages in the page cache,
 * which vary with what the node has read of the file lately (docs/build.md).
 */
export function daemonMemory(daemons) {
  console.log('  the node daemons in their pods (issue 18: every daemon idle <= 80 MiB; peak after both waves):');
  table(
    ['', 'figure', 'of which anonymous', 'target', ''],
    daemons.flatMap(([name, m]) => [
      [`${name} RSS after start-up`, mib(m.idleKiB), m.anonKiB ? mib(m.anonKiB) : '-', '<= 80 MiB', verdict(m.idleKiB, 80 * 1024)],
      [`${name} peak RSS (VmHWM)`, mib(m.peakKiB), '', '-', ''],
    ]),
  );
}
