// Runs tools/node-lab/pod-bench.ts (real nodes; root) with `args` (and `env` added) under the bench's Node, and
// returns the JSON object it prints last. Shared by the node-pods modules.
import { spawnSync } from 'node:child_process';
import * as path from 'node:path';

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
