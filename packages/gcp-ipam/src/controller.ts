/**
 * gcp-ipam-controller: keeps every IPPool's status (capacity, allocated, available, lastUpdated) current.
 *
 * The plugin never writes the pool on the ADD path (one IPAllocation per IP, so ADDs share no object); without
 * this controller the counters are only as fresh as the last GC or `gcp-ipam-provisioner status`. Here two
 * informers (IPPools, IPAllocations indexed by spec.pool) keep a cache current, and each change marks its pool
 * dirty. A pool is reconciled once its changes have been quiet for `debounceMs` (at most `maxDelayMs` after
 * the first one, so a steady stream still shows): a burst of 30 ADDs costs one status write, not 30. The
 * kit's WorkQueue.addAfter keeps the earliest time of a key, a fixed window that would cut a burst in two,
 * hence the small trailing debounce in front of the queue. Counts come from the cache, never from a list per
 * event; status is written (merge patch of the status subresource) only when a counter differs, and every
 * `resyncMs` every pool is checked again from the cache. The informers re-list after 410 Gone and reconnect
 * with backoff while the API server is away (@cnikit/kube).
 *
 * PoolStatusDaemon runs it as Coil's controllers run (@cnikit/kube's LeaderRunner): only while this process
 * holds a Lease, so two replicas are safe; metrics and probes on their own ports; stop() releases the Lease.
 */
import {
  Controller,
  HealthServer,
  Informer,
  KubeMetrics,
  LeaderRunner,
  MetricsIn,
  ResourceClient,
  byField,
  defineResource,
  isNotFound,
  leaderElectionHealthy,
  leaderIdentity,
  traceLogger,
  type KubeTransport,
  type LeaderElector,
  type ListenAddr,
  type Logger,
} from '@cnikit/kube';
import { capacityOf } from './allocator';
import { ALLOC_PLURAL, GROUP, POOL_PLURAL, VERSION, type IPAllocation, type IPPool, type IPPoolStatus } from './types';

export const IPPools = defineResource<IPPool>({ group: GROUP, version: VERSION, kind: 'IPPool', plural: POOL_PLURAL, namespaced: false });
export const IPAllocations = defineResource<IPAllocation>({
  group: GROUP,
  version: VERSION,
  kind: 'IPAllocation',
  plural: ALLOC_PLURAL,
  namespaced: false,
});

export const DEFAULT_DEBOUNCE_MS = 500;
export const DEFAULT_RESYNC_MS = 60_000;

/** The counters of a pool's status (lastUpdated aside). */
export type PoolCounters = Required<Omit<IPPoolStatus, 'lastUpdated'>>;

const sameCounters = (s: IPPoolStatus | undefined, c: PoolCounters): boolean =>
  s?.capacity === c.capacity && s.allocated === c.allocated && s.available === c.available;

/**
 * Per-key trailing debounce: `fire(key)` once no `touch(key)` came for `quietMs`, or `maxMs` after the first
 * touch of the round, whichever is first.
 */
class Debouncer {
  private readonly pending = new Map<string, { timer: NodeJS.Timeout; firstAt: number }>();

  constructor(
    private readonly quietMs: number,
    private readonly maxMs: number,
    private readonly fire: (key: string) => void,
  ) {}

  touch(key: string): void {
    const now = Date.now();
    const p = this.pending.get(key);
    if (p) clearTimeout(p.timer);
    const firstAt = p?.firstAt ?? now;
    const delay = Math.max(0, Math.min(this.quietMs, firstAt + this.maxMs - now));
    const timer = setTimeout(() => {
      this.pending.delete(key);
      this.fire(key);
    }, delay);
    this.pending.set(key, { timer, firstAt });
  }

  clear(): void {
    for (const { timer } of this.pending.values()) clearTimeout(timer);
    this.pending.clear();
  }
}

export interface PoolStatusControllerOptions {
  transport: KubeTransport;
  /** The kit's metrics; the pool gauges and the status-write counter join its registry. Default a new one. */
  kubeMetrics?: KubeMetrics;
  /** Quiet time after a pool's last change before its status is written. Default 500 ms. */
  debounceMs?: number;
  /** Longest a write waits while changes keep coming. Default 10 x debounceMs. */
  maxDelayMs?: number;
  /** Every pool is checked again from the cache this often (0 = never). Default 60 s. */
  resyncMs?: number;
  /** Informers' reconnect backoff (tests shorten it). Default the kit's, 200 ms doubling to 30 s. */
  backoff?: { initialMs?: number; maxMs?: number };
  logger?: Logger;
}

/** The pool status reconciler: informers, debounce, work queue. start() once, stop() once. */
export class PoolStatusController {
  readonly pools: ResourceClient<IPPool>;
  readonly allocations: ResourceClient<IPAllocation>;
  readonly poolInformer: Informer<IPPool>;
  readonly allocationInformer: Informer<IPAllocation>;
  private readonly controller: Controller;
  private readonly debouncer: Debouncer;
  /** The status this process wrote last per pool, and the pool's resourceVersion before that write. */
  private readonly lastWrite = new Map<string, { before: string | undefined; counters: PoolCounters }>();
  private readonly gauges: Record<keyof PoolCounters, ReturnType<MetricsIn['gauge']>>;
  private readonly writes: ReturnType<MetricsIn['counter']>;
  private readonly log: Logger;
  private resyncTimer: NodeJS.Timeout | undefined;

  constructor(private readonly opts: PoolStatusControllerOptions) {
    this.log = opts.logger ?? traceLogger('gcp-ipam.controller');
    this.pools = new ResourceClient(opts.transport, IPPools);
    this.allocations = new ResourceClient(opts.transport, IPAllocations);
    const kubeMetrics = opts.kubeMetrics ?? new KubeMetrics();
    const informerOpts = { metrics: kubeMetrics, backoff: opts.backoff };
    this.poolInformer = new Informer(this.pools, informerOpts);
    this.allocationInformer = new Informer(this.allocations, { ...informerOpts, indexers: { pool: byField('spec.pool') } });

    const m = new MetricsIn(kubeMetrics.registry);
    this.gauges = {
      capacity: m.gauge('gcp_ipam_pool_capacity', 'addresses the pool can hand out', ['pool']),
      allocated: m.gauge('gcp_ipam_pool_allocated', 'IPAllocations of the pool in the cache', ['pool']),
      available: m.gauge('gcp_ipam_pool_available', 'capacity minus allocated', ['pool']),
    };
    this.writes = m.counter('gcp_ipam_controller_status_writes_total', 'IPPool status writes (counters changed)');

    this.controller = new Controller({
      name: 'ippool-status',
      reconcile: (r) => this.reconcile(r.name),
      metrics: kubeMetrics,
      logger: this.log,
    });
    const debounceMs = opts.debounceMs ?? DEFAULT_DEBOUNCE_MS;
    this.debouncer = new Debouncer(debounceMs, opts.maxDelayMs ?? 10 * debounceMs, (pool) => this.controller.enqueue(pool));
    const touch = (pool: string | undefined): void => {
      if (pool) this.debouncer.touch(pool);
    };
    this.poolInformer.addHandlers({
      add: (p) => touch(p.metadata.name),
      update: (old, cur) => {
        if (old.metadata.resourceVersion !== cur.metadata.resourceVersion) touch(cur.metadata.name);
      },
      delete: (p) => touch(p.metadata.name),
    });
    this.allocationInformer.addHandlers({
      add: (a) => touch(a.spec?.pool),
      update: (old, cur) => {
        // spec.pool is immutable (CEL); an object replaced through a re-list may still name another pool.
        if (old.spec?.pool !== cur.spec?.pool) {
          touch(old.spec?.pool);
          touch(cur.spec?.pool);
        }
      },
      delete: (a) => touch(a.spec?.pool),
    });
  }

  /** Lists both resources (waits for the caches), then reconciles; every pool is written within one debounce. */
  async start(): Promise<void> {
    await Promise.all([this.poolInformer.start(), this.allocationInformer.start()]);
    await this.controller.start();
    const every = this.opts.resyncMs ?? DEFAULT_RESYNC_MS;
    if (every > 0) {
      this.resyncTimer = setInterval(() => this.resync(), every);
      this.resyncTimer.unref();
    }
    this.log.info('started', { pools: this.poolInformer.store.size, allocations: this.allocationInformer.store.size });
  }

  /** Stops the timers, waits for a running write, stops the watches. */
  async stop(): Promise<void> {
    if (this.resyncTimer) clearInterval(this.resyncTimer);
    this.debouncer.clear();
    await this.controller.stop();
    await Promise.all([this.poolInformer.stop(), this.allocationInformer.stop()]);
  }

  synced(): boolean {
    return this.poolInformer.hasSynced() && this.allocationInformer.hasSynced();
  }

  /** Queues every cached pool (the periodic resync; also corrects a status someone else overwrote). */
  resync(): void {
    for (const name of this.poolInformer.store.keys()) this.controller.enqueue(name);
  }

  /** The counters of a cached pool, from the cache. */
  counters(pool: IPPool): PoolCounters {
    const capacity = capacityOf(pool.spec.cidr);
    const allocated = this.allocationInformer.store.byIndex('pool', pool.metadata.name).length;
    return { capacity, allocated, available: Math.max(0, capacity - allocated) };
  }

  /** Writes the pool's status when its counters differ from the stored ones. */
  async reconcile(name: string): Promise<void> {
    const pool = this.poolInformer.store.get(name);
    if (!pool) {
      for (const g of Object.values(this.gauges)) g.remove({ pool: name });
      this.lastWrite.delete(name);
      return;
    }
    const c = this.counters(pool);
    for (const k of ['capacity', 'allocated', 'available'] as const) this.gauges[k].set({ pool: name }, c[k]);
    if (sameCounters(pool.status, c)) return;
    // Written already, and the pool's watch event for that write has not reached the cache yet.
    const last = this.lastWrite.get(name);
    if (last && last.before === pool.metadata.resourceVersion && sameCounters(last.counters, c)) return;
    const status: IPPoolStatus = { ...c, lastUpdated: new Date().toISOString() };
    try {
      await this.pools.patchStatus(name, { status }, 'merge');
    } catch (err) {
      if (isNotFound(err)) return; // deleted meanwhile: its delete event reconciles it again
      throw err;
    }
    this.lastWrite.set(name, { before: pool.metadata.resourceVersion, counters: c });
    this.writes.inc();
    this.log.info('pool status written', { pool: name, ...c });
  }
}

export interface PoolStatusDaemonOptions extends PoolStatusControllerOptions {
  /** Served at /metrics (its registry), with the controller's metrics. */
  kubeMetrics: KubeMetrics;
  /** Lease namespace (POD_NAMESPACE in a cluster) and name. */
  leaseNamespace: string;
  leaseName: string;
  /** Default leaderIdentity(): hostname and a random UUID. */
  identity?: string;
  leaseDurationMs?: number;
  renewDeadlineMs?: number;
  retryPeriodMs?: number;
  metricsAddr: ListenAddr;
  healthAddr: ListenAddr;
  /** Leadership lost otherwise than through stop(), or the controller failed to start: main exits 1. */
  onFatal(why: string): void;
}

/**
 * The controller under Lease leader election, with /metrics and /healthz /readyz: liveness follows the
 * elector, readiness the caches while leading. start() resolves once the endpoints listen; the controller
 * starts when the Lease is acquired.
 */
export class PoolStatusDaemon {
  readonly controller: PoolStatusController;
  readonly runner: LeaderRunner;
  readonly elector: LeaderElector;
  readonly metricsServer: HealthServer;
  readonly healthServer: HealthServer;
  private running: Promise<void> | undefined;

  constructor(opts: PoolStatusDaemonOptions) {
    this.controller = new PoolStatusController(opts);
    this.runner = new LeaderRunner(this.controller, {
      transport: opts.transport,
      namespace: opts.leaseNamespace,
      name: opts.leaseName,
      identity: opts.identity ?? leaderIdentity(),
      leaseDurationMs: opts.leaseDurationMs,
      renewDeadlineMs: opts.renewDeadlineMs,
      retryPeriodMs: opts.retryPeriodMs,
      metrics: opts.kubeMetrics,
      onLost: () => opts.onFatal('lost leadership'),
      onStartFailed: (err) => opts.onFatal(`start failed: ${(err as Error).message}`),
    });
    this.elector = this.runner.elector;
    this.metricsServer = new HealthServer({
      host: opts.metricsAddr.host || '0.0.0.0',
      port: opts.metricsAddr.port,
      registry: opts.kubeMetrics.registry,
    });
    this.healthServer = new HealthServer({ host: opts.healthAddr.host || '0.0.0.0', port: opts.healthAddr.port })
      .addHealthCheck('leader-election', leaderElectionHealthy(this.elector))
      .addReadyCheck('informers', () => !this.runner.isLeader() || this.controller.synced());
  }

  isLeader(): boolean {
    return this.runner.isLeader();
  }

  /** Serves the endpoints and campaigns for the Lease (in the background). */
  async start(): Promise<void> {
    await this.metricsServer.listen();
    await this.healthServer.listen();
    this.running = this.runner.run();
  }

  /** Stops the controller, releases the Lease, closes the endpoints. */
  async stop(): Promise<void> {
    await this.runner.stop();
    await this.running;
    await Promise.all([this.metricsServer.close(), this.healthServer.close()]);
  }
}
