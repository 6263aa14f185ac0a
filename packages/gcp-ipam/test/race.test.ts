// Allocation races: 200 ADDs across 20 nodes at once must hand out 200 distinct IPs, each attached to exactly
// one VM. Also measures the design choice: one IPAllocation object per IP versus gcp-cni's single IPPool
// object updated under optimistic locking (10 retries, backoff from 100 ms) for the same 200 concurrent claims.
import { claim, type Owner } from '../src/allocator';
import { kubeFromFile, isConflict } from '@cnikit/kube/lite';
import { API_VERSION } from '../src/types';
import {
  addNode,
  allocations,
  callPlugin,
  createPool,
  kubeconfig,
  newFake,
  nodeConf,
  parseOut,
  uniqueName,
  useCrds,
  ZONE,
} from './support';

useCrds();

test('200 ADDs across 20 nodes at once: no duplicate IP, every alias on exactly one VM', async () => {
  const fake = await newFake({ opDurationMs: 200 });
  try {
    const pool = await createPool('10.112.0.0/24'); // 253 usable for 200 pods: collisions are frequent
    const nodes = Array.from({ length: 20 }, (_, i) => addNode(fake, `race-${i}-${uniqueName('n')}`));
    const t0 = Date.now();
    const outs = await Promise.all(
      Array.from({ length: 200 }, (_, i) => {
        const n = nodes[i % 20]!;
        return callPlugin('ADD', nodeConf(fake, pool.metadata.name, n), { containerId: `race-${i}` });
      }),
    );
    const ms = Date.now() - t0;
    const errors = outs.filter((o) => o.exitCode !== 0).map((o) => o.stdout);
    expect(errors).toEqual([]);
    const ips = outs.map((o) => parseOut(o).ips![0]!.address.split('/')[0]!);
    expect(new Set(ips).size).toBe(200);
    const attached = nodes.flatMap((n) => fake.aliasesOf(ZONE, n.instance));
    expect(attached).toHaveLength(200);
    expect(new Set(attached).size).toBe(200);
    expect(await allocations(pool.metadata.name)).toHaveLength(200);
    process.stderr.write(
      `race: 200 ADDs on 20 nodes (200 ms operations): ${ms} ms, ${fake.calls['instances.updateNetworkInterface']} updateNetworkInterface calls\n`,
    );
  } finally {
    await fake.stop();
  }
});

test('measure: 200 concurrent claims, per-IP objects vs one IPPool object with optimistic locking', async () => {
  const k = kubeFromFile(kubeconfig);
  try {
    // per-IP objects (this design)
    const pool = await createPool('10.113.0.0/16');
    const owner = (i: number): Owner => ({
      podName: `p${i}`,
      podNamespace: 'default',
      podUID: `u${i}`,
      nodeName: `n${i % 20}`,
      instance: `n${i % 20}`,
      zone: ZONE,
      containerID: `c${i}`,
      ifName: 'eth0',
    });
    let t0 = Date.now();
    const res = await Promise.all(Array.from({ length: 200 }, (_, i) => claim(k, pool, owner(i))));
    const perIpMs = Date.now() - t0;
    const attempts = res.reduce((s, r) => s + r.stats.attempts, 0);
    expect(new Set(res.map((r) => r.alloc.spec.ip)).size).toBe(200);

    // the anchor's design: every allocation in one object, get -> first free -> update, retry on 409.
    // Its exponential backoff makes this take up to ~100 s whatever the count, so it runs on request only:
    // GCP_IPAM_MEASURE_N=200 npx jest -c packages/gcp-ipam/jest.config.js race (the figure in docs/gcp-ipam.md).
    if (!process.env.GCP_IPAM_MEASURE_N) {
      process.stderr.write(
        `measure: 200 concurrent claims: per-IP objects ${perIpMs} ms (${attempts} creates); single-object side skipped (set GCP_IPAM_MEASURE_N)\n`,
      );
      return;
    }
    const single = await createPool('10.114.0.0/16');
    const path = `/apis/${API_VERSION}/ippools/${single.metadata.name}`;
    let conflicts = 0;
    let failed = 0;
    const anchorClaim = async (i: number): Promise<string | undefined> => {
      let backoff = 100;
      for (let attempt = 0; attempt < 10; attempt++) {
        const cur = await k.request<{
          metadata: Record<string, unknown>;
          spec: Record<string, unknown> & { allocations?: Record<string, unknown> };
        }>('GET', path);
        const taken = new Set(
          Object.keys(
            (cur.metadata.annotations as Record<string, string> | undefined)?.['allocations']
              ? JSON.parse((cur.metadata.annotations as Record<string, string>).allocations!)
              : {},
          ),
        );
        let ip = '';
        for (let n = 2; n < 65_534; n++) {
          const c = `10.114.${n >> 8}.${n & 255}`;
          if (!taken.has(c)) {
            ip = c;
            break;
          }
        }
        const allocs = Object.fromEntries([...taken].map((t) => [t, 1]));
        allocs[ip] = i;
        // the CRD here has no spec.allocations (pruned): keep the map in an annotation, same single-object contention
        try {
          await k.request('PUT', path, { ...cur, metadata: { ...cur.metadata, annotations: { allocations: JSON.stringify(allocs) } } });
          return ip;
        } catch (err) {
          if (!isConflict(err)) throw err;
          conflicts++;
          await new Promise((r) => setTimeout(r, backoff));
          backoff *= 2;
        }
      }
      failed++;
      return undefined;
    };
    // 200 took ~110 s on 2 cores (1564 conflicts, 79 claims gave up)
    const n = Number(process.env.GCP_IPAM_MEASURE_N);
    t0 = Date.now();
    const got = await Promise.all(Array.from({ length: n }, (_, i) => anchorClaim(i)));
    const singleMs = Date.now() - t0;
    const ok = got.filter(Boolean);
    expect(new Set(ok).size).toBe(ok.length); // the lock itself is sound; it is slow and gives up
    process.stderr.write(
      `measure: 200 concurrent claims: per-IP objects ${perIpMs} ms (${attempts} creates, ${attempts - 200} AlreadyExists); ` +
        `single object (${n} claims) ${singleMs} ms, ${conflicts} conflicts, ${failed} gave up after 10 retries\n`,
    );
  } finally {
    k.close();
  }
}, 300_000); // the single-object side backs off exponentially (100 ms x 2^k, 10 tries): slow on a loaded machine
