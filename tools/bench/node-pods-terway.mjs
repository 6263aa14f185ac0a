// Pods on a real node with terway (issue "The cloud IPAMs on real nodes"): 30 pods created at once on one kubelet
// + containerd node, time from `kubectl apply` to each pod's Ready, with Debian's bridge + host-local (Go) and
// then with terway installed from its image and manifests against the Alibaba Cloud emulator: a cold pool (every
// address asked for as the pods come) and a warm one (min_pool_size 30, filled before the wave). Alibaba Cloud
// publishes no OpenAPI latency: the emulator adds 200 ms to every call and takes 3 s per ENI attach, figures of
// the order Terway's own timeouts and back-offs are built around. tools/node-lab/pod-bench.ts --family terway
// does the work; needs root. About 3 minutes.
import { ms, table } from './lib/measure.mjs';
import { daemonMemory, podBench } from './lib/pod-bench.mjs';

export const title = 'real node: 30 pods create -> Ready, terway (cold and warm pool) vs bridge + host-local';
export const order = 92;

export function run(ctx) {
  if (process.getuid?.() !== 0) return ctx.skip('needs root (real nodes: network and mount namespaces)');
  const res = podBench(ctx, ['--family', 'terway', '--pods', '30', '--call-ms', '200', '--op-ms', '3000']);
  const row = (name, x) => [name, ms(x.p50), ms(x.p99), ms(x.max)];
  table(
    [`${res.pods} pods on one node`, 'create->Ready p50', 'p99', 'max'],
    [
      row('bridge + host-local (Go, no cloud)', res.bridge),
      row(`terway, cold pool (${res.callMs} ms OpenAPI calls, ${res.attachMs} ms attaches)`, res.terwayCold),
      row('terway, warm pool (30 idle addresses)', res.terwayWarm),
    ],
  );
  console.log(`  OpenAPI calls in all (install, both waves, the pool filling and emptying): ${res.openApiCalls}`);
  daemonMemory([['terwayd', res.terwayd]]);
}
