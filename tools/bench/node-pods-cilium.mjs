// Pods on a real node with cilium-eni-ipam (issue "The cloud IPAMs on real nodes"): 30 pods created at once on one
// kubelet + containerd node, time from `kubectl apply` to each pod's Ready, with Debian's bridge + host-local (Go)
// and then with cilium-eni-ipam installed from its image and manifests against moto (EC2) behind the fault proxy,
// which adds 200 ms to every EC2 call (AWS publishes no latency figures): a wave with the pool at Cilium's default
// pre-allocation (8), then one with pre-allocate raised to 30 and the pool full first. The AWS lab
// (e2e/node/cilium-lib.ts) is bundled by esbuild into dist/bench/aws-lab.cjs for tools/node-lab/pod-bench.ts
// --family cilium-eni-ipam, which does the work; needs root. About 4 minutes.
import { spawnSync } from 'node:child_process';
import * as path from 'node:path';
import { ms, table } from './lib/measure.mjs';
import { daemonMemory, podBench } from './lib/pod-bench.mjs';

export const title = 'real node: 30 pods create -> Ready, cilium-eni-ipam (default and raised pre-allocation) vs bridge + host-local';
export const order = 93;

/** The AWS lab as one CommonJS file; moto_server's path from tools/moto/setup.sh (installed if needed). */
function awsLab(root) {
  const out = path.join(root, 'dist', 'bench', 'aws-lab.cjs');
  const esbuild = path.join(root, 'node_modules', '.bin', 'esbuild');
  const entry = path.join(root, 'e2e', 'node', 'cilium-lib.ts');
  const b = spawnSync(esbuild, [entry, '--bundle', '--platform=node', '--format=cjs', `--outfile=${out}`, '--log-level=error'], {
    encoding: 'utf8',
  });
  if (b.status !== 0) throw new Error(`esbuild ${entry}: ${b.stderr}`);
  const moto = spawnSync('bash', [path.join(root, 'tools', 'moto', 'setup.sh')], { encoding: 'utf8', timeout: 600_000 });
  if (moto.status !== 0) throw new Error(`tools/moto/setup.sh: ${moto.stderr}`);
  return { CNIKIT_AWS_LAB: out, CNIKIT_MOTO_SERVER: moto.stdout.trim().split('\n').pop() };
}

export function run(ctx) {
  if (process.getuid?.() !== 0) return ctx.skip('needs root (real nodes: network and mount namespaces)');
  const res = podBench(ctx, ['--family', 'cilium-eni-ipam', '--pods', '30', '--call-ms', '200'], awsLab(ctx.root));
  const row = (name, x) => [name, ms(x.p50), ms(x.p99), ms(x.max)];
  table(
    [`${res.pods} pods on one node`, 'create->Ready p50', 'p99', 'max'],
    [
      row('bridge + host-local (Go, no cloud)', res.bridge),
      row(`cilium-eni-ipam, pre-allocate 8 (${res.callMs} ms EC2 calls)`, res.ciliumDefault),
      row('cilium-eni-ipam, pre-allocate 30 (the pool full first)', res.ciliumWarm),
    ],
  );
  console.log(`  EC2 calls in all (install, both waves, the pool growing and the excess released): ${res.ec2Calls}`);
  daemonMemory([
    ['cilium-eni-agent', res.agent],
    ['cilium-eni-operator', res.operator],
  ]);
}
