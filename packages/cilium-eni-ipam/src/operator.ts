/**
 * The operator: watches CiliumNodes (and pods, for surge), runs NodeSyncer per node on parallel workers,
 * writes spec.ipam.pool and status.{eni,ipam.operator-status,ipam.release-ips}, resyncs every node each
 * minute in order of deficit, collects dangling ENIs by tag, and exports metrics. Runs under leader election
 * when started with runWithLeaderElection().
 */
import {
  Controller,
  Informer,
  KubeMetrics,
  LeaderRunner,
  Pods,
  byField,
  clientFor,
  traceLogger,
  type KubeTransport,
  type Logger,
  type Pod,
  type ReconcileResult,
  type ResourceClient,
  MetricsIn,
} from '@cnikit/kube';
import { Registry, type Counter, type Gauge } from '@cnikit/kube/prom';
import type { Ec2Api } from './ec2';
import type { LimitsTable } from './limits';
import { NodeSyncer, TAG_CLUSTER, ipamParams, newMemory, type NodeMemory, type NodeSyncResult } from './node-sync';
import { calculateNeededIPs } from './prealloc';
import { CiliumNodes, type CiliumNode, type ReleaseState } from './types';

export interface OperatorOptions {
  transport: KubeTransport;
  ec2: Ec2Api;
  clusterName: string;
  limits: LimitsTable;
  /** Parallel node workers (Cilium: up to 50). Default 50. */
  workers?: number;
  releaseExcess?: boolean;
  excessDelayMs?: number;
  /** Full resync period. Default 60 s. */
  resyncMs?: number;
  /** Re-check period while a handshake or allocation is in flight. Default 1 s. */
  busyResyncMs?: number;
  /** ENI GC period (0 = off). Default 5 min; at most 25 ENIs per run. */
  gcIntervalMs?: number;
  /** Count pending pods per node for surge allocation. Default true. */
  surge?: boolean;
  registry?: Registry;
  logger?: Logger;
}

export class OperatorMetrics {
  readonly available: Gauge<'node'>;
  readonly used: Gauge<'node'>;
  readonly needed: Gauge<'node'>;
  readonly allocations: Counter<'type'>;
  readonly errors: Counter<'node'>;
  readonly gcDeleted: Counter;
  readonly cleanupErrors: Counter<'operation'>;
  constructor(readonly registry: Registry) {
    const m = new MetricsIn(registry);
    this.available = m.gauge('cilium_operator_ipam_available_ips', 'IPs in the node pool', ['node']);
    this.used = m.gauge('cilium_operator_ipam_used_ips', 'IPs handed out on the node', ['node']);
    this.needed = m.gauge('cilium_operator_ipam_needed_ips', 'Deficit against the watermark', ['node']);
    this.allocations = m.counter('cilium_operator_ipam_ec2_actions_total', 'EC2 allocation actions (assign, create, unassign)', ['type']);
    this.errors = m.counter('cilium_operator_ipam_node_errors_total', 'Node syncs that ended with an error', ['node']);
    this.gcDeleted = m.counter('cilium_operator_eni_gc_deleted_total', 'Dangling ENIs deleted by the GC');
    this.cleanupErrors = m.counter(
      'cilium_operator_ipam_cleanup_errors_total',
      'Clean-up calls that failed (ENI deletes after a failed attach, ENI GC)',
      ['operation'],
    );
  }
}

/** Merges the operator's release-ips changes into the latest status (the agent may have answered since). */
export function mergeReleaseIps(
  latest: Record<string, ReleaseState>,
  read: Record<string, ReleaseState>,
  mine: Record<string, ReleaseState>,
): Record<string, ReleaseState> {
  const out = { ...latest };
  for (const [ipAddr, s] of Object.entries(mine)) {
    if (s === 'released' || s === 'marked-for-release') {
      // Never overwrite an agent answer that arrived after our read with a new mark.
      if (s === 'marked-for-release' && latest[ipAddr] !== undefined && latest[ipAddr] !== read[ipAddr]) continue;
      out[ipAddr] = s;
    }
  }
  for (const ipAddr of Object.keys(read)) {
    if (!(ipAddr in mine) && latest[ipAddr] === read[ipAddr]) delete out[ipAddr];
  }
  return out;
}

const same = (a: unknown, b: unknown): boolean => JSON.stringify(a ?? null) === JSON.stringify(b ?? null);

export class Operator {
  readonly nodes: ResourceClient<CiliumNode>;
  readonly informer: Informer<CiliumNode>;
  readonly pods?: Informer<Pod>;
  readonly controller: Controller;
  readonly syncer: NodeSyncer;
  readonly metrics: OperatorMetrics;
  readonly kubeMetrics: KubeMetrics;
  private readonly memory = new Map<string, NodeMemory>();
  private readonly log: Logger;
  private timers: NodeJS.Timeout[] = [];
  /** Last result per node (tests, status). */
  readonly last = new Map<string, NodeSyncResult>();

  constructor(private readonly opts: OperatorOptions) {
    const registry = opts.registry ?? new Registry();
    this.metrics = new OperatorMetrics(registry);
    this.kubeMetrics = new KubeMetrics({ registry });
    this.log = opts.logger ?? traceLogger('cilium-eni.operator');
    this.nodes = clientFor(opts.transport, CiliumNodes);
    this.informer = new Informer(this.nodes, { metrics: this.kubeMetrics });
    if (opts.surge !== false) {
      this.pods = new Informer(clientFor(opts.transport, Pods), {
        indexers: { node: byField('spec.nodeName') },
        metrics: this.kubeMetrics,
      });
    }
    this.syncer = new NodeSyncer(opts.ec2, {
      clusterName: opts.clusterName,
      limits: opts.limits,
      releaseExcess: opts.releaseExcess,
      excessDelayMs: opts.excessDelayMs,
      onCleanupError: (operation, id, err) => this.cleanupFailed(operation, id, err),
    });
    this.controller = new Controller({
      name: 'cilium-eni-ipam',
      workers: opts.workers ?? 50,
      reconcile: (r) => this.reconcile(r.name),
      metrics: this.kubeMetrics,
      logger: this.log,
    });
    const enqueue = (n: CiliumNode): void => this.controller.enqueue(n.metadata.name!);
    this.informer.addHandlers({
      add: enqueue,
      // The operator's own writes (pool, ENIs) do not retrigger; agent writes (used, answers) and spec changes do.
      update: (o, n) => {
        const key = (x: CiliumNode) => [
          x.spec['instance-id'],
          x.spec.eni,
          { ...x.spec.ipam, pool: undefined },
          x.status?.ipam?.used,
          x.status?.ipam?.['release-ips'],
        ];
        if (!same(key(o), key(n))) enqueue(n);
      },
      delete: enqueue,
    });
    this.pods?.addHandlers({
      add: (p) => {
        if (p.spec.nodeName && this.informer.store.get(p.spec.nodeName)) this.controller.enqueue(p.spec.nodeName);
      },
    });
  }

  /**
   * Pods on the node that still need an IP (surge): Pending, not host-network, no IP reported yet, less the
   * ones whose IP the agent has already handed out. Such a pod is in status.ipam.used while kubelet has not
   * yet reported its IP, so counting it as pending too counted it twice (20 ADDs with pre-allocate 8 grew
   * the pool to 40-48 instead of 28). Pods do not name their sandbox, so the used entries that running pods
   * do not account for are taken as held by pending ones.
   */
  pendingPods(node: string): number {
    if (!this.pods) return 0;
    const pods = this.pods.store
      .byIndex('node', node)
      .filter((p) => !p.spec.hostNetwork && !['Succeeded', 'Failed'].includes(p.status?.phase ?? ''));
    const waiting = pods.filter((p) => (p.status?.phase ?? 'Pending') === 'Pending' && !p.status?.podIP).length;
    const withIp = pods.filter((p) => p.status?.podIP).length;
    const used = Object.keys(this.informer.store.get(node)?.status?.ipam?.used ?? {}).length;
    return Math.max(0, waiting - Math.max(0, used - withIp));
  }

  async start(): Promise<void> {
    if (this.pods) await this.pods.start();
    await this.controller.watch(this.informer, () => []).start();
    this.timers.push(setInterval(() => this.resyncAll(), this.opts.resyncMs ?? 60_000).unref());
    const gc = this.opts.gcIntervalMs ?? 300_000;
    if (gc > 0)
      this.timers.push(
        setInterval(() => {
          void this.gcEnis().catch((e) => this.log.warn('ENI GC failed', { error: e }));
        }, gc).unref(),
      );
  }

  async stop(): Promise<void> {
    for (const t of this.timers) clearInterval(t);
    this.timers = [];
    await this.controller.stop();
    await this.pods?.stop();
  }

  /** Enqueues every node, biggest deficit first. */
  resyncAll(): void {
    const nodes = this.informer.store.list().map((n) => {
      const p = ipamParams(n);
      const avail = Object.keys(n.spec.ipam?.pool ?? {}).length;
      const used = Object.keys(n.status?.ipam?.used ?? {}).length + this.pendingPods(n.metadata.name!);
      return { name: n.metadata.name!, deficit: calculateNeededIPs(avail, used, p.preAllocate, p.minAllocate, p.maxAllocate) };
    });
    nodes.sort((a, b) => b.deficit - a.deficit);
    for (const n of nodes) this.controller.enqueue(n.name);
  }

  async reconcile(name: string): Promise<ReconcileResult> {
    const node = this.informer.store.get(name);
    if (!node) {
      this.memory.delete(name);
      this.last.delete(name);
      for (const g of [this.metrics.available, this.metrics.used, this.metrics.needed]) g.remove({ node: name });
      // Node gone: its ENIs detach with the instance; collect what is left dangling.
      await this.gcEnis().catch((e) => this.log.warn('ENI GC after node deletion failed', { node: name, error: e }));
      return {};
    }
    let mem = this.memory.get(name);
    if (!mem) this.memory.set(name, (mem = newMemory()));
    const readReleases = { ...(node.status?.ipam?.['release-ips'] ?? {}) };
    const res = await this.syncer.sync(node, mem, this.pendingPods(name));
    this.last.set(name, res);
    for (const a of res.actions) this.metrics.allocations.inc({ type: a.split(' ')[0] });
    if (res.error) {
      this.metrics.errors.inc({ node: name });
      this.log.warn('node sync incomplete', { node: name, error: res.error });
    }
    this.metrics.available.set({ node: name }, Object.keys(res.pool).length);
    this.metrics.used.set({ node: name }, Object.keys(node.status?.ipam?.used ?? {}).length);
    this.metrics.needed.set({ node: name }, res.plan.needed);

    // Status (ENIs) first, then the pool (spec), so the agent knows an IP's ENI when it sees the IP; each a
    // read-modify-write retried on 409 Conflict with fresh reads, so a concurrent agent write never wedges
    // the node (cilium#35404).
    await this.nodes.updateWithRetry(
      name,
      (cur) => {
        const status = cur.status ?? {};
        const ipam = { ...(status.ipam ?? {}) };
        const release = mergeReleaseIps(ipam['release-ips'] ?? {}, readReleases, res.releaseIps);
        const opStatus = res.error ? { error: res.error } : {};
        if (
          same(status.eni?.enis ?? {}, res.enis) &&
          same(ipam['operator-status'] ?? {}, opStatus) &&
          same(ipam['release-ips'] ?? {}, release)
        )
          return false;
        ipam['operator-status'] = opStatus;
        ipam['release-ips'] = release;
        cur.status = { ...status, ipam, eni: { enis: res.enis } };
        return cur;
      },
      { subresource: 'status' },
    );
    if (!same(node.spec.ipam?.pool ?? {}, res.pool)) {
      await this.nodes.updateWithRetry(name, (cur) => {
        if (same(cur.spec.ipam?.pool ?? {}, res.pool)) return false;
        cur.spec.ipam = { ...(cur.spec.ipam ?? {}), pool: res.pool };
        return cur;
      });
    }
    return { requeueAfterMs: res.again ? (this.opts.busyResyncMs ?? 1000) : (this.opts.resyncMs ?? 60_000) };
  }

  /** Deletes detached ENIs tagged with this cluster's name (at most 25 per run). */
  async gcEnis(): Promise<string[]> {
    const dangling = await this.opts.ec2.describeNetworkInterfaces({ tags: { [TAG_CLUSTER]: this.opts.clusterName }, status: 'available' });
    const deleted: string[] = [];
    for (const e of dangling.slice(0, 25)) {
      try {
        await this.opts.ec2.deleteNetworkInterface(e.id);
      } catch (err) {
        this.cleanupFailed('DeleteNetworkInterface', e.id, err); // one stuck ENI must not stop the others
        continue;
      }
      this.metrics.gcDeleted.inc();
      deleted.push(e.id);
    }
    return deleted;
  }

  private cleanupFailed(operation: string, id: string, err: unknown): void {
    this.metrics.cleanupErrors.inc({ operation });
    this.log.error('clean-up failed', { operation, id, error: err instanceof Error ? err.message : String(err) });
  }

  /**
   * Runs the operator only while holding the Lease `name` in `namespace` (@cnikit/kube's LeaderRunner): it
   * starts when the Lease is acquired and stops as soon as leadership ends. runner.stop() stops it and
   * releases the Lease. A loss not caused by stop() goes to onLost, a failed start to onStartFailed (both
   * logged by default; the operator's main exits 1, as Cilium's operator does on "Leader election lost").
   */
  static async runWithLeaderElection(
    opts: OperatorOptions & {
      namespace: string;
      identity: string;
      leaseName?: string;
      leaseDurationMs?: number;
      renewDeadlineMs?: number;
      retryPeriodMs?: number;
      onLost?(): void;
      onStartFailed?(err: unknown): void;
    },
  ): Promise<{ runner: LeaderRunner; operator: Operator }> {
    const operator = new Operator(opts);
    const runner = new LeaderRunner(operator, {
      transport: opts.transport,
      namespace: opts.namespace,
      name: opts.leaseName ?? 'cilium-operator-resource-lock',
      identity: opts.identity,
      leaseDurationMs: opts.leaseDurationMs,
      renewDeadlineMs: opts.renewDeadlineMs,
      retryPeriodMs: opts.retryPeriodMs,
      metrics: operator.kubeMetrics,
      onLost: opts.onLost ?? (() => operator.log.error('lost leadership')),
      onStartFailed: opts.onStartFailed ?? ((err) => operator.log.error('start failed', { error: err })),
    });
    void runner.run();
    return { runner, operator };
  }
}
