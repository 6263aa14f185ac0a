/**
 * coil-ipam-controller's reconcilers, one per kind, sharing the pool state:
 *
 * - BlockRequest: carve the next free block of the pool for the node (the index after the last one carved,
 *   so a freed block is not reused at once), mark the request Complete (or Failed: unknown pool, pool being
 *   deleted, pool full). Carving for one pool is serialized (a per-pool lock), pools are independent, and a
 *   block carries the request's UID as label: a retried reconcile finds it instead of carving a second one.
 * - AddressPool: add the finalizer; on deletion hold it until no block of the pool is left; export
 *   coil_controller_max_blocks / coil_controller_allocated_blocks.
 * - Node: when a Node is deleted its blocks are deleted (finalizer removed: nobody uses them any more).
 *   A periodic GC does the same for dangling blocks whose node no longer exists.
 */
import {
  Controller,
  Informer,
  ResourceClient,
  Nodes,
  byLabel,
  hasFinalizer,
  isAlreadyExists,
  isBeingDeleted,
  isNotFound,
  removeFinalizer,
  addFinalizer,
  setControllerReference,
  type KubeTransport,
  type Node,
  type Logger,
  traceLogger,
  MetricsIn,
} from '@cnikit/kube';
import type { Gauge, Registry } from '@cnikit/kube/prom';
import {
  AddressBlocks,
  AddressPools,
  BlockRequests,
  FINALIZER,
  LABEL_NODE,
  LABEL_POOL,
  LABEL_REQUEST,
  blockName,
  requestOutcome,
  type AddressBlock,
  type AddressPool,
  type BlockRequest,
  type BlockRequestCondition,
} from '../api/types';
import { blockAt, maxBlocks, nextFreeIndex } from '../ipam/pool';
import { KeyedMutex } from '../util';

export interface IpamControllerOptions {
  transport: KubeTransport;
  registry: Registry;
  /** Dangling-block GC period. Default 1 h. */
  gcIntervalMs?: number;
  workers?: number;
  logger?: Logger;
}

export class IpamController {
  readonly pools: ResourceClient<AddressPool>;
  readonly blocks: ResourceClient<AddressBlock>;
  readonly requests: ResourceClient<BlockRequest>;
  readonly nodes: ResourceClient<Node>;
  readonly poolInformer: Informer<AddressPool>;
  readonly blockInformer: Informer<AddressBlock>;
  readonly requestInformer: Informer<BlockRequest>;
  readonly nodeInformer: Informer<Node>;
  private readonly controllers: Controller[];
  private readonly poolLock = new KeyedMutex();
  /** Last index carved per pool (in memory; after a restart, the highest existing index). */
  private readonly lastIndex = new Map<string, number>();
  private readonly maxBlocksGauge: Gauge<'pool'>;
  private readonly allocatedGauge: Gauge<'pool'>;
  private gcTimer: NodeJS.Timeout | undefined;
  private readonly log: Logger;

  constructor(private readonly opts: IpamControllerOptions) {
    const t = opts.transport;
    this.log = opts.logger ?? traceLogger('coil.controller');
    this.pools = new ResourceClient(t, AddressPools);
    this.blocks = new ResourceClient(t, AddressBlocks);
    this.requests = new ResourceClient(t, BlockRequests);
    this.nodes = new ResourceClient(t, Nodes);
    this.poolInformer = new Informer(this.pools);
    this.blockInformer = new Informer(this.blocks, { indexers: { pool: byLabel(LABEL_POOL), node: byLabel(LABEL_NODE) } });
    this.requestInformer = new Informer(this.requests);
    this.nodeInformer = new Informer(this.nodes);
    const m = new MetricsIn(opts.registry);
    this.maxBlocksGauge = m.gauge('coil_controller_max_blocks', 'the number of blocks the pool can hold', ['pool']);
    this.allocatedGauge = m.gauge('coil_controller_allocated_blocks', 'the number of blocks carved out of the pool', ['pool']);

    const workers = opts.workers ?? 2;
    const poolCtl = new Controller({ name: 'addresspool', workers, reconcile: (r) => this.reconcilePool(r.name) })
      .watch(this.poolInformer)
      .watch(this.blockInformer, (b) => [b.metadata.labels?.[LABEL_POOL] ?? ''].filter(Boolean));
    const reqCtl = new Controller({ name: 'blockrequest', workers, reconcile: (r) => this.reconcileRequest(r.name) }).watch(
      this.requestInformer,
    );
    const nodeCtl = new Controller({ name: 'node', workers: 1, reconcile: (r) => this.reconcileNode(r.name) })
      .watch(this.nodeInformer)
      .watch(this.blockInformer, (b) => [b.metadata.labels?.[LABEL_NODE] ?? ''].filter(Boolean));
    this.controllers = [poolCtl, reqCtl, nodeCtl];
  }

  async start(): Promise<void> {
    // Every informer synced before any reconcile reads the caches.
    await Promise.all([this.poolInformer, this.blockInformer, this.requestInformer, this.nodeInformer].map((i) => i.start()));
    for (const c of this.controllers) await c.start();
    const every = this.opts.gcIntervalMs ?? 3_600_000;
    this.gcTimer = setInterval(() => {
      this.gcDangling().catch((err: unknown) => this.log.warn('dangling block GC failed', { error: err }));
    }, every);
    this.gcTimer.unref();
  }

  async stop(): Promise<void> {
    if (this.gcTimer) clearInterval(this.gcTimer);
    for (const c of this.controllers) await c.stop();
  }

  synced(): boolean {
    return [this.poolInformer, this.blockInformer, this.requestInformer, this.nodeInformer].every((i) => i.hasSynced());
  }

  // AddressPool

  async reconcilePool(name: string): Promise<void> {
    const pool = this.poolInformer.store.get(name);
    const blocks = this.blockInformer.store.byIndex('pool', name);
    if (!pool) {
      this.maxBlocksGauge.remove({ pool: name });
      this.allocatedGauge.remove({ pool: name });
      this.lastIndex.delete(name);
      return;
    }
    this.maxBlocksGauge.set({ pool: name }, maxBlocks(pool.spec));
    this.allocatedGauge.set({ pool: name }, blocks.length);
    if (isBeingDeleted(pool)) {
      // Held until every block is gone (coild frees them, or the node GC does): the finalizer is the hold.
      if (blocks.length === 0 && hasFinalizer(pool, FINALIZER)) {
        await removeFinalizer(this.pools, pool, FINALIZER);
        this.log.info('pool deleted: no blocks left', { pool: name });
      }
      return;
    }
    if (!hasFinalizer(pool, FINALIZER)) await addFinalizer(this.pools, pool, FINALIZER);
  }

  // BlockRequest

  async reconcileRequest(name: string): Promise<void> {
    const cached = this.requestInformer.store.get(name);
    if (!cached || isBeingDeleted(cached) || requestOutcome(cached)) return;
    const req = await this.requests.find(name);
    if (!req || requestOutcome(req)) return;
    const { nodeName, poolName } = req.spec;
    await this.poolLock.run(poolName, async () => {
      const pool = await this.pools.find(poolName);
      if (!pool) return this.finish(req, 'Failed', 'PoolNotFound', `address pool ${poolName} not found`);
      if (isBeingDeleted(pool)) return this.finish(req, 'Failed', 'PoolDeleting', `address pool ${poolName} is being deleted`);
      const existing = (await this.blocks.list({ labelSelector: `${LABEL_POOL}=${poolName}` })).items;
      const mine = existing.find((b) => b.metadata.labels?.[LABEL_REQUEST] === req.metadata.uid);
      if (mine) return this.finish(req, 'Complete', '', '', mine.metadata.name);
      const used = new Set(existing.map((b) => b.index));
      const total = maxBlocks(pool.spec);
      const last = this.lastIndex.get(poolName) ?? Math.max(-1, ...used);
      for (;;) {
        const index = nextFreeIndex(total, used, last);
        if (index === undefined) return this.finish(req, 'Failed', 'PoolExhausted', `address pool ${poolName} has no free block`);
        const range = blockAt(pool.spec, index)!;
        const block: AddressBlock = {
          metadata: {
            name: blockName(poolName, index),
            labels: { [LABEL_POOL]: poolName, [LABEL_NODE]: nodeName, [LABEL_REQUEST]: req.metadata.uid ?? '' },
            finalizers: [FINALIZER],
          },
          index,
          ...(range.ipv4 ? { ipv4: range.ipv4 } : {}),
          ...(range.ipv6 ? { ipv6: range.ipv6 } : {}),
        };
        setControllerReference(pool, block);
        try {
          await this.blocks.create(block);
        } catch (err) {
          if (isAlreadyExists(err)) {
            used.add(index);
            continue;
          }
          throw err;
        }
        this.lastIndex.set(poolName, index);
        this.log.info('block carved', { pool: poolName, node: nodeName, index, ipv4: range.ipv4, ipv6: range.ipv6 });
        return this.finish(req, 'Complete', '', '', block.metadata.name);
      }
    });
  }

  private async finish(req: BlockRequest, type: 'Complete' | 'Failed', reason: string, message: string, blockName?: string): Promise<void> {
    const now = new Date().toISOString().replace(/\.\d{3}Z$/, 'Z');
    const cond: BlockRequestCondition = { type, status: 'True', lastProbeTime: now, lastTransitionTime: now };
    if (reason) cond.reason = reason;
    if (message) cond.message = message;
    try {
      await this.requests.updateWithRetry(
        req.metadata.name!,
        (cur) => {
          if (requestOutcome(cur)) return false;
          cur.status = { ...(blockName ? { addressBlockName: blockName } : {}), conditions: [cond] };
          return cur;
        },
        { subresource: 'status' },
      );
    } catch (err) {
      if (!isNotFound(err)) throw err;
    }
  }

  // Node

  async reconcileNode(name: string): Promise<void> {
    if (this.nodeInformer.store.get(name)) return;
    // Confirm with the API server: a cache that lags must not cost a live node its blocks.
    if (await this.nodes.find(name)) return;
    for (const b of this.blockInformer.store.byIndex('node', name)) await this.deleteBlock(b);
  }

  /** Deletes blocks whose node no longer exists (what the Node watch may have missed while not leading). */
  async gcDangling(): Promise<number> {
    let n = 0;
    const blocks = (await this.blocks.listAll()).items;
    const nodes = new Set((await this.nodes.listAll()).items.map((x) => x.metadata.name));
    for (const b of blocks) {
      const node = b.metadata.labels?.[LABEL_NODE];
      if (node && !nodes.has(node)) {
        await this.deleteBlock(b);
        n++;
      }
    }
    return n;
  }

  private async deleteBlock(b: AddressBlock): Promise<void> {
    this.log.info('deleting block of a deleted node', { block: b.metadata.name, node: b.metadata.labels?.[LABEL_NODE] });
    await this.blocks.delete(b.metadata.name!, { ignoreNotFound: true });
    await removeFinalizer(this.blocks, b, FINALIZER);
  }
}
