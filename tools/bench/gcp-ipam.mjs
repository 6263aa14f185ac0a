// Issue 8's benchmark: 30 pods ADDed at once on one node, alias updates taking 3 s (CAST AI gcp-cni's measured
// latency, the fake GCE's default), time until every ADD has returned (all pods ready). The built
// dist/bin/gcp-ipam runs as 30 real processes against a real kube-apiserver + etcd and the fake GCE.
// Baseline: gcp-cni's design holds a per-node lock around each pod's cloud call, so its 30 ADDs take
// 30 x (one ADD alone); one ADD alone is measured here and multiplied (running it would take ~95 s per run).
// Target: <= 10 s. Also prints updateNetworkInterface calls per 30 pods. Never fails on timing.
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { execFileSync } from 'node:child_process';
import { median, ms } from './lib/measure.mjs';

export const title = '30 concurrent ADDs on one node, 3 s alias updates: time to all ready (target <= 10 s; gcp-cni ~30 x 3 s)';
export const order = 80;

function runPlugin(bin, command, containerId, conf) {
  return new Promise((resolve, reject) => {
    const env = {
      CNI_COMMAND: command,
      CNI_CONTAINERID: containerId,
      CNI_NETNS: '/var/run/netns/bench',
      CNI_IFNAME: 'eth0',
      CNI_PATH: '/opt/cni/bin',
      CNI_ARGS: '',
    };
    const c = spawn(bin, [], { env, stdio: ['pipe', 'pipe', 'pipe'] });
    let out = '';
    c.stdout.on('data', (d) => {
      out += d;
    });
    c.on('error', reject);
    c.on('close', (code) => (code === 0 ? resolve(out) : reject(new Error(`${command} ${containerId}: exit ${code}: ${out}`))));
    c.stdin.end(conf);
  });
}

export async function run(ctx) {
  const bin = path.join(ctx.binDir, 'gcp-ipam');
  if (!fs.existsSync(bin)) return ctx.skip(`${bin} not built (npm run build)`);
  const { startCluster, stopCluster } = await import(path.join(ctx.root, 'testing/kube/src/cluster.ts'));
  const { FakeGce } = await import(path.join(ctx.root, 'testing/gce-emulator/src/emulator.ts'));
  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'cnikit-bench-gcp-'));
  const info = await startCluster({ stateDir: path.join(work, 'cluster'), garbageCollector: false });
  const fake = new FakeGce({ opDurationMs: 3000 });
  await fake.start();
  fake.addInstance('europe-west1-b', 'bench-node');
  try {
    const kubectl = (...a) => execFileSync('kubectl', ['--kubeconfig', info.kubeconfig, ...a], { encoding: 'utf8' });
    kubectl('apply', '-f', path.join(ctx.root, 'packages/gcp-ipam/config/crds.yaml'));
    kubectl(
      'wait',
      '--for=condition=Established',
      'crd/ippools.ipam.gcp-cni.cast.ai',
      'crd/ipallocations.ipam.gcp-cni.cast.ai',
      '--timeout=30s',
    );
    const pool = path.join(work, 'pool.yaml');
    fs.writeFileSync(
      pool,
      'apiVersion: ipam.gcp-cni.cast.ai/v1alpha1\nkind: IPPool\nmetadata:\n  name: bench\nspec:\n  cidr: 10.117.0.0/16\n  subnet: projects/test-project/regions/europe-west1/subnetworks/default\n  secondaryRangeName: live\n',
    );
    for (let i = 0; ; i++) {
      try {
        kubectl('apply', '-f', pool);
        break;
      } catch (e) {
        if (i > 20) throw e;
        await new Promise((r) => setTimeout(r, 250));
      }
    }
    const conf = JSON.stringify({
      cniVersion: '1.0.0',
      name: 'bench',
      type: 'ptp',
      ipam: {
        type: 'gcp-ipam',
        kubeconfig: info.kubeconfig,
        pool: 'bench',
        project: 'test-project',
        zone: 'europe-west1-b',
        instance: 'bench-node',
        nodeName: 'bench-node',
        computeEndpoint: fake.computeEndpoint,
        stateDir: path.join(work, 'state'),
      },
    });
    const runs = Math.min(ctx.runs, 3);
    // one ADD alone (what gcp-cni's per-node lock serializes 30 times)
    const single = [];
    for (let i = 0; i < runs; i++) {
      const t0 = performance.now();
      await runPlugin(bin, 'ADD', `single-${i}`, conf);
      single.push(performance.now() - t0);
      await runPlugin(bin, 'DEL', `single-${i}`, conf);
    }
    const all = [];
    const calls = [];
    for (let r = 0; r < runs; r++) {
      fake.resetCounters();
      const t0 = performance.now();
      await Promise.all(Array.from({ length: 30 }, (_, i) => runPlugin(bin, 'ADD', `b${r}-${i}`, conf)));
      all.push(performance.now() - t0);
      calls.push(fake.calls['instances.updateNetworkInterface'] ?? 0);
      if (fake.aliasesOf('europe-west1-b', 'bench-node').length !== 30) throw new Error('not every alias attached');
      await Promise.all(Array.from({ length: 30 }, (_, i) => runPlugin(bin, 'DEL', `b${r}-${i}`, conf)));
    }
    // the same 30 ADDs with instant operations: what process start-up, the API server and CPU contention cost
    fake.opDurationMs = 0;
    const overhead = [];
    for (let r = 0; r < runs; r++) {
      const t0 = performance.now();
      await Promise.all(Array.from({ length: 30 }, (_, i) => runPlugin(bin, 'ADD', `o${r}-${i}`, conf)));
      overhead.push(performance.now() - t0);
      await Promise.all(Array.from({ length: 30 }, (_, i) => runPlugin(bin, 'DEL', `o${r}-${i}`, conf)));
    }
    const m = median(all);
    const serial = 30 * median(single);
    console.log(`  one ADD alone (3 s operation):        median ${ms(median(single))}`);
    console.log(
      `  30 ADDs at once, all ready:           median ${ms(m)} over ${runs} runs (${all.map(ms).join(', ')}); target <= 10 s: ${m <= 10_000 ? 'met' : 'NOT met'}`,
    );
    console.log(`  updateNetworkInterface calls / 30:    ${calls.join(', ')}`);
    console.log(
      `  30 ADDs at once, 0 s operations:      median ${ms(median(overhead))} (start-up + API server + CPU; load average ${os.loadavg()[0].toFixed(1)} on ${os.cpus().length} CPUs)`,
    );
    console.log(`  gcp-cni's design (30 x one ADD, serial): ${ms(serial)}  -> ${(serial / m).toFixed(1)}x faster`);
  } finally {
    await fake.stop();
    await stopCluster(info);
    fs.rmSync(work, { recursive: true, force: true });
  }
}
