// Pods on a real node with gcp-ipam (issue "The cloud IPAMs on real nodes"): 30 pods created at once on one
// kubelet + containerd node, time from `kubectl apply` to each pod's Ready, with Debian's bridge + host-local
// (Go) and then with gcp-ipam installed from its image and manifests against the GCE emulator, whose alias
// operations take 3 s (what GCE's updateNetworkInterface takes); two waves, the first right after the install.
// tools/node-lab/pod-bench.ts --family gcp-ipam does the work; needs root. About 3 minutes.
import { ms, table } from './lib/measure.mjs';
import { podBench } from './lib/pod-bench.mjs';

export const title = 'real node: 30 pods create -> Ready, gcp-ipam (3 s alias operations) vs bridge + host-local';
export const order = 91;

export function run(ctx) {
  if (process.getuid?.() !== 0) return ctx.skip('needs root (real nodes: network and mount namespaces)');
  const res = podBench(ctx, ['--family', 'gcp-ipam', '--pods', '30', '--op-ms', '3000']);
  const row = (name, x) => [name, ms(x.p50), ms(x.p99), ms(x.max)];
  table(
    [`${res.pods} pods on one node`, 'create->Ready p50', 'p99', 'max'],
    [
      row('bridge + host-local (Go, no cloud)', res.bridge),
      row(`gcp-ipam, first wave after install (${res.opMs} ms alias operations)`, res.gcpFirst),
      row('gcp-ipam, second wave', res.gcpSecond),
    ],
  );
  console.log(`  updateNetworkInterface calls for ${2 * res.pods} ADDs and ${2 * res.pods} DELs: ${res.updateCalls}`);
}
