// gcp-ipam-controller against the real API server: pool status converges from the watch cache, a burst of
// IPAllocations costs few status writes (counted as the pool's resourceVersion changes, seen by a watch of its
// own), pools created later get a status, the watches survive an outage and 410 Gone, and two daemons share
// one Lease (stop releases it, the other takes over).
import { Informer, KubeMetrics, ResourceClient, Leases, type KubeTransport } from '@cnikit/kube';
import { TcpProxy, eventually, transportFor } from '@cnikit/kube-testing';
import { capacityOf } from '../src/allocator';
import { IPAllocations, IPPools, PoolStatusController, PoolStatusDaemon, type PoolStatusControllerOptions } from '../src/controller';
import { LABEL_NODE, LABEL_POOL, allocationName, type IPAllocation, type IPPool } from '../src/types';
import { cluster, createPool, ensureNamespace, kube, uniqueName, useCrds } from './support';

useCrds();

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

const pools = (): ResourceClient<IPPool> => new ResourceClient(kube(), IPPools);
const allocs = (): ResourceClient<IPAllocation> => new ResourceClient(kube(), IPAllocations);

/** `n` host addresses of a /24 pool from .10 on. */
const ips = (cidr: string, n: number, from = 10): string[] => Array.from({ length: n }, (_, i) => cidr.replace(/\.0\/24$/, `.${from + i}`));

async function createAllocations(pool: string, addrs: string[]): Promise<void> {
  await Promise.all(
    addrs.map((ip) =>
      allocs().create({
        metadata: { name: allocationName(pool, ip), labels: { [LABEL_POOL]: pool, [LABEL_NODE]: 'node-a' } },
        spec: {
          pool,
          ip,
          podName: `pod-${ip}`,
          podNamespace: 'default',
          podUID: 'u',
          nodeName: 'node-a',
          instance: 'node-a',
          zone: 'europe-west1-b',
          containerID: `c-${ip}`,
          ifName: 'eth0',
          allocatedAt: new Date().toISOString(),
          phase: 'Allocated',
        },
      }),
    ),
  );
}

async function deleteAllocations(pool: string, addrs: string[]): Promise<void> {
  await Promise.all(addrs.map((ip) => allocs().delete(allocationName(pool, ip), { ignoreNotFound: true })));
}

/** Starts a controller (stopped after the test). */
async function startController(
  opts: Partial<PoolStatusControllerOptions> = {},
  transport: KubeTransport = kube(),
): Promise<PoolStatusController> {
  const ctl = new PoolStatusController({ transport, debounceMs: 300, ...opts });
  await ctl.start();
  cleanups.push(() => ctl.stop());
  return ctl;
}

/**
 * Counts the pool's resourceVersion changes (every status write is one) through a watch of that pool alone;
 * writes() first waits until the watch has seen the version the API server stores now.
 */
async function countWrites(pool: string): Promise<{ writes: () => Promise<number> }> {
  const inf = new Informer(new ResourceClient(kube(), IPPools), { fieldSelector: `metadata.name=${pool}` });
  let n = 0;
  inf.addHandlers({
    update: (o, c) => {
      if (o.metadata.resourceVersion !== c.metadata.resourceVersion) n++;
    },
  });
  await inf.start();
  cleanups.push(() => inf.stop());
  return {
    writes: async () => {
      const rv = (await pools().get(pool)).metadata.resourceVersion;
      await eventually('the pool watch caught up', () => inf.store.get(pool)?.metadata.resourceVersion === rv, 60_000);
      return n;
    },
  };
}

async function statusOf(pool: string): Promise<IPPool['status']> {
  return (await pools().get(pool)).status;
}

/** Waits until the pool's stored status has these counters. */
async function converged(pool: string, allocated: number, cidr: string): Promise<void> {
  const capacity = capacityOf(cidr);
  await eventually(
    `${pool} status allocated=${allocated}`,
    async () => {
      const s = await statusOf(pool);
      return s?.capacity === capacity && s.allocated === allocated && s.available === capacity - allocated && s.lastUpdated !== undefined;
    },
    60_000,
    100,
  );
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

test('pool status converges; a burst of 30 IPAllocations (then their deletion) costs at most 2 status writes each', async () => {
  const cidr = '10.201.1.0/24';
  const pool = (await createPool(cidr)).metadata.name;
  const counter = await countWrites(pool);
  // A long debounce: the burst's 30 events arrive well within it even on a loaded machine.
  await startController({ debounceMs: 1000, maxDelayMs: 30_000 });
  await converged(pool, 0, cidr);
  const afterStart = await counter.writes();
  expect(afterStart).toBe(1);

  // Converged means the last write is done; the pause would show a (wrong) extra write with the same counters.
  const burst = ips(cidr, 30);
  await createAllocations(pool, burst);
  await converged(pool, 30, cidr);
  await sleep(2000);
  const addWrites = (await counter.writes()) - afterStart;
  expect(addWrites).toBeGreaterThanOrEqual(1);
  expect(addWrites).toBeLessThanOrEqual(2);

  await deleteAllocations(pool, burst);
  await converged(pool, 0, cidr);
  await sleep(2000);
  const delWrites = (await counter.writes()) - afterStart - addWrites;
  expect(delWrites).toBeGreaterThanOrEqual(1);
  expect(delWrites).toBeLessThanOrEqual(2);
});

test('a pool created later gets a status counting allocations made before it; a status overwritten by someone else is corrected', async () => {
  await startController();
  const cidr = '10.201.2.0/24';
  const name = uniqueName('pool-late');
  await createAllocations(name, ips(cidr, 3));
  await createPool(cidr, name);
  await converged(name, 3, cidr);

  await pools().patchStatus(name, { status: { capacity: 1, allocated: 99, available: 0 } }, 'merge');
  await converged(name, 3, cidr);
});

test('the periodic resync writes a status the events alone left stale', async () => {
  const cidr = '10.201.3.0/24';
  const pool = (await createPool(cidr)).metadata.name;
  // A debounce far beyond the test: only the resync (every second) can reconcile the pool.
  await startController({ debounceMs: 600_000, maxDelayMs: 600_000, resyncMs: 1000 });
  await createAllocations(pool, ips(cidr, 2));
  await converged(pool, 2, cidr);
});

/**
 * Makes the next watch of `plural` on `transport` answer as the API server does once the resourceVersion it
 * resumes from is compacted away: an ERROR event carrying a 410 Expired Status. (This package's API server keeps
 * its watch cache, which serves a resume from memory, so compacting etcd alone does not provoke it here.)
 */
function expireNextWatch(transport: KubeTransport, plural: string): void {
  const streamLines = transport.streamLines.bind(transport);
  let armed = true;
  transport.streamLines = async function* (path, opts) {
    if (armed && path.endsWith(`/${plural}`)) {
      armed = false;
      const status = {
        kind: 'Status',
        apiVersion: 'v1',
        metadata: {},
        status: 'Failure',
        message: 'too old resource version',
        reason: 'Expired',
        code: 410,
      };
      yield JSON.stringify({ type: 'ERROR', object: status });
      return;
    }
    yield* streamLines(path, opts);
  };
}

test('watches survive an unreachable API server, and a watch expired meanwhile (410) is re-listed', async () => {
  const proxy = await TcpProxy.forUrl(cluster.server).listen();
  const transport = transportFor(cluster, { server: proxy.urlFor(cluster.server) });
  cleanups.push(
    () => proxy.close(),
    () => transport.close(),
  );
  const cidr = '10.201.4.0/24';
  const pool = (await createPool(cidr)).metadata.name;
  await createAllocations(pool, ips(cidr, 5));
  const ctl = await startController({ backoff: { initialMs: 50, maxMs: 500 } }, transport);
  await converged(pool, 5, cidr);

  // The API server unreachable while 2 allocations go and 4 come; when it is back, the allocations' watch has expired.
  proxy.block();
  expireNextWatch(transport, 'ipallocations');
  await deleteAllocations(pool, ips(cidr, 2));
  await createAllocations(pool, ips(cidr, 4, 100));
  await sleep(300);
  proxy.unblock();

  await converged(pool, 7, cidr);
  expect(ctl.allocationInformer.stats.relistsOnGone).toBe(1);
  expect(ctl.allocationInformer.stats.lists).toBe(2);
  expect(ctl.poolInformer.stats.watchErrors).toBeGreaterThanOrEqual(1);
  expect(ctl.allocationInformer.store.byIndex('pool', pool)).toHaveLength(7);
  // Still watching after the re-list.
  await deleteAllocations(pool, ips(cidr, 1, 100));
  await converged(pool, 6, cidr);
});

test('two daemons share one Lease: one leads and serves ready, stop releases the Lease, the other takes over; nothing is written after stop', async () => {
  const namespace = uniqueName('gcp-ipam-ctl');
  await ensureNamespace(namespace);
  const leaseName = 'gcp-ipam-controller';
  const fatal: string[] = [];
  const daemon = (id: string): PoolStatusDaemon =>
    new PoolStatusDaemon({
      transport: kube(),
      kubeMetrics: new KubeMetrics(),
      identity: id,
      leaseNamespace: namespace,
      leaseName,
      leaseDurationMs: 3000,
      renewDeadlineMs: 2000,
      retryPeriodMs: 500,
      debounceMs: 300,
      metricsAddr: { host: '127.0.0.1', port: 0 },
      healthAddr: { host: '127.0.0.1', port: 0 },
      onFatal: (why) => fatal.push(`${id}: ${why}`),
    });
  const a = daemon('replica-a');
  const b = daemon('replica-b');
  await a.start();
  await b.start();
  const running = new Set([a, b]);
  cleanups.push(async () => {
    for (const d of running) await d.stop();
  });

  const cidr = '10.201.5.0/24';
  const pool = (await createPool(cidr)).metadata.name;
  const leader = await eventually('a leader', () => [a, b].find((d) => d.isLeader()), 60_000, 50);
  const standby = leader === a ? b : a;
  expect(standby.isLeader()).toBe(false);
  await createAllocations(pool, ips(cidr, 4));
  await converged(pool, 4, cidr);
  await eventually('leader ready', async () => (await fetch(`${leader.healthServer.url}/readyz`)).status === 200, 30_000);
  expect((await fetch(`${standby.healthServer.url}/readyz`)).status).toBe(200); // a standby is ready (nothing to sync)
  expect((await fetch(`${leader.healthServer.url}/healthz`)).status).toBe(200);
  const metrics = await (await fetch(`${leader.metricsServer.url}/metrics`)).text();
  expect(metrics).toContain(`gcp_ipam_pool_allocated{pool="${pool}"} 4`);
  expect(metrics).toMatch(/leader_election_master_status\{name="gcp-ipam-controller"\} 1/);

  const leaderId = leader.elector.identity;
  const leaderHealth = leader.healthServer.url;
  await leader.stop();
  running.delete(leader);
  const lease = await new ResourceClient(kube(), Leases, { namespace }).get(leaseName);
  expect(lease.spec?.holderIdentity).not.toBe(leaderId); // released ('') or already taken by the standby
  await expect(fetch(`${leaderHealth}/healthz`)).rejects.toThrow();

  await eventually('standby leads', () => standby.isLeader(), 60_000, 50);
  await createAllocations(pool, ips(cidr, 2, 50));
  await converged(pool, 6, cidr);

  await standby.stop();
  running.delete(standby);
  const released = await new ResourceClient(kube(), Leases, { namespace }).get(leaseName);
  expect(released.spec?.holderIdentity).toBe('');
  // Stopped: a change now stays unwritten (waited well past the debounce).
  await createAllocations(pool, ips(cidr, 1, 60));
  await sleep(1500);
  expect((await statusOf(pool))?.allocated).toBe(6);
  expect(fatal).toEqual([]);
});
