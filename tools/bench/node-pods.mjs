// Pods on a real node (issue "Pods on real Kubernetes nodes"): 30 pods created at once on one kubelet +
// containerd node, time from `kubectl apply` to each pod's Ready, with Debian's bridge + host-local (Go) and then
// with Coil installed from its image and manifests; and the CPU the node spends per minute on CNI STATUS
// calls (containerd's reaped children while idle). tools/node-lab/pod-bench.ts does the work; needs root and
// what tools/node-lab/build.sh builds (cached). About 5 minutes.
import { ms, table } from './lib/measure.mjs';
import { podBench } from './lib/pod-bench.mjs';

export const title = 'real node: 30 pods create -> Ready, Coil vs bridge + host-local; CPU per minute on STATUS';
export const order = 90;

export function run(ctx) {
  if (process.getuid?.() !== 0) return ctx.skip('needs root (real nodes: network and mount namespaces)');
  const res = podBench(ctx, ['--pods', '30', '--idle-s', '60']);
  const row = (name, x) => [name, ms(x.p50), ms(x.p99), ms(x.max), x.idle.callsPerMin.toFixed(1), `${x.idle.cpuMsPerMin.toFixed(0)} ms`];
  table(
    [`${res.pods} pods on one node`, 'create->Ready p50', 'p99', 'max', 'STATUS calls/min (idle)', 'containerd children CPU/min (idle)'],
    [row('bridge + host-local (Go, CNI 1.0.0: no STATUS)', res.bridge), row('Coil (image + manifests, CNI 1.1.0)', res.coil)],
  );
  const perMin = res.coil.statusCpuMs * res.coil.idle.callsPerMin;
  console.log(
    `  coil STATUS: ${ms(res.coil.statusCpuMs)} CPU per call x ${res.coil.idle.callsPerMin.toFixed(1)} calls/min = ` +
      `${perMin.toFixed(0)} ms CPU per minute (${((perMin / 60_000) * 100).toFixed(2)} % of one core)`,
  );
  console.log("  (create->Ready: from one `kubectl apply` of all pods to Ready as one `kubectl get -w` saw it; STATUS calls: coild's");
  console.log('   counter; containerd children: its cutime+cstime, i.e. the plugins it ran on its own and the shims it reaped)');
}
