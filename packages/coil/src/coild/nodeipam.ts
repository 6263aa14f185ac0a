/**
 * NodeIPAM: the node's address blocks, cached in memory with a bitmap per block.
 *
 * - allocate() takes an address from a block the node already owns, synchronously (no lock, no I/O), so
 *   ADDs from owned blocks never wait on anything. Only when every block of the pool is full does it ask
 *   for a new block: one BlockRequest per pool at a time (single flight), which every ADD waiting for
 *   that pool shares; other pools and other ADDs are not held up.
 * - free() returns an address; the block is deleted (AddressBlock deleted, finalizer removed, export
 *   route withdrawn) when its last address is freed. Marking the block retired happens in the same
 *   synchronous step as the check, so no ADD can take an address from a block being deleted.
 * - register() rebuilds the cache from the kernel at start-up; gc() deletes blocks the node holds in the
 *   API but does not use.
 */
import { CniCode, CniError, TransientError, ip } from '@cnikit/netlib';
import {
  ResourceClient,
  Nodes,
  isBeingDeleted,
  isNotFound,
  removeFinalizer,
  sleep,
  traceLogger,
  type KubeTransport,
  type Logger,
  type Node,
} from '@cnikit/kube';
import {
  AddressBlocks,
  AddressPools,
  BLOCK_REQUEST_TIMEOUT_MS,
  BlockRequests,
  FINALIZER,
  LABEL_NODE,
  LABEL_POOL,
  LABEL_RESERVED,
  requestName,
  requestOutcome,
  type AddressBlock,
  type AddressPool,
  type BlockRequest,
} from '../api/types';
import { BitmapAllocator } from '../ipam/allocator';

export interface OwnedBlock {
  name: string;
  pool: string;
  index: number;
  ipv4?: string;
  ipv6?: string;
  alloc: BitmapAllocator;
  retired: boolean;
}

export interface Allocation {
  pool: string;
  block: string;
  ipv4?: string;
  ipv6?: string;
}

export interface BlockListener {
  blockAdded(b: OwnedBlock): Promise<void>;
  blockRemoved(b: OwnedBlock): Promise<void>;
}

export class PoolNotFoundError extends CniError {
  constructor(pool: string) {
    super(CniCode.InvalidNetworkConfig, 'address pool not found', pool);
    this.name = 'PoolNotFoundError';
  }
}

export class PoolExhaustedError extends CniError {
  constructor(pool: string, msg: string) {
    super(CniCode.TryAgainLater, 'address pool exhausted', `${pool}: ${msg}`);
    this.name = 'PoolExhaustedError';
  }
}

const blockCidrs = (b: { ipv4?: string; ipv6?: string }): string[] => [b.ipv4, b.ipv6].filter((x): x is string => Boolean(x));

export class NodeIPAM {
  private readonly blocks = new Map<string, OwnedBlock[]>();
  private readonly inflight = new Map<string, Promise<void>>();
  private readonly blockClient: ResourceClient<AddressBlock>;
  private readonly requestClient: ResourceClient<BlockRequest>;
  private readonly poolClient: ResourceClient<AddressPool>;
  private readonly nodeClient: ResourceClient<Node>;
  private node: Node | undefined;
  private readonly log: Logger;
  /** BlockRequests issued (for tests and metrics). */
  requestsIssued = 0;

  constructor(
    transport: KubeTransport,
    readonly nodeName: string,
    private readonly listener: BlockListener,
    opts: { logger?: Logger; requestTimeoutMs?: number } = {},
  ) {
    this.blockClient = new ResourceClient(transport, AddressBlocks);
    this.requestClient = new ResourceClient(transport, BlockRequests);
    this.poolClient = new ResourceClient(transport, AddressPools);
    this.nodeClient = new ResourceClient(transport, Nodes);
    this.log = opts.logger ?? traceLogger('coild.ipam', { node: nodeName });
    this.requestTimeoutMs = opts.requestTimeoutMs ?? BLOCK_REQUEST_TIMEOUT_MS;
  }
  private readonly requestTimeoutMs: number;

  /** Loads the node's blocks from the API server (start-up). */
  async load(): Promise<OwnedBlock[]> {
    this.node = await this.nodeClient.get(this.nodeName);
    const list = await this.blockClient.listAll({ labelSelector: `${LABEL_NODE}=${this.nodeName}` });
    this.blocks.clear();
    const sizes = new Map<string, number>();
    for (const b of list.items) {
      const pool = b.metadata.labels?.[LABEL_POOL];
      if (!pool) continue;
      let bits = sizes.get(pool);
      if (bits === undefined) {
        const p = await this.poolClient.find(pool);
        bits = p ? p.spec.blockSizeBits : blockBits(b);
        sizes.set(pool, bits);
      }
      this.addOwned(b, bits, b.metadata.labels?.[LABEL_RESERVED] === 'true' || isBeingDeleted(b));
    }
    return this.owned();
  }

  owned(): OwnedBlock[] {
    return [...this.blocks.values()].flat();
  }

  ownedIn(pool: string): OwnedBlock[] {
    return this.blocks.get(pool) ?? [];
  }

  private addOwned(b: AddressBlock, bits: number, retired = false): OwnedBlock {
    const pool = b.metadata.labels![LABEL_POOL]!;
    const ob: OwnedBlock = { name: b.metadata.name!, pool, index: b.index, alloc: new BitmapAllocator(2 ** bits), retired };
    if (b.ipv4) ob.ipv4 = b.ipv4;
    if (b.ipv6) ob.ipv6 = b.ipv6;
    const l = this.blocks.get(pool) ?? [];
    l.push(ob);
    l.sort((x, y) => x.index - y.index);
    this.blocks.set(pool, l);
    return ob;
  }

  private blockOf(pool: string, addrs: { ipv4?: string; ipv6?: string }): { block: OwnedBlock; offset: number } | undefined {
    for (const b of this.ownedIn(pool)) {
      if (addrs.ipv4 && b.ipv4 && ip.contains(b.ipv4, addrs.ipv4)) return { block: b, offset: Number(ip.indexOf(b.ipv4, addrs.ipv4)) };
      if (addrs.ipv6 && b.ipv6 && ip.contains(b.ipv6, addrs.ipv6)) return { block: b, offset: Number(ip.indexOf(b.ipv6, addrs.ipv6)) };
    }
    return undefined;
  }

  /** Marks an address used (state rebuilt from the kernel). false when no owned block holds it. */
  register(pool: string, addrs: { ipv4?: string; ipv6?: string }): boolean {
    const hit = this.blockOf(pool, addrs);
    if (!hit) return false;
    hit.block.alloc.set(hit.offset);
    return true;
  }

  /** Takes an address of the pool, requesting a new block when the owned ones are full. */
  async allocate(pool: string): Promise<Allocation> {
    for (let attempt = 0; ; attempt++) {
      const got = this.tryAllocate(pool);
      if (got) return got;
      if (attempt >= 5) throw new TransientError('no free address after new blocks', pool);
      await this.requestBlock(pool);
    }
  }

  private tryAllocate(pool: string): Allocation | undefined {
    for (const b of this.ownedIn(pool)) {
      if (b.retired) continue;
      const off = b.alloc.allocate();
      if (off === undefined) continue;
      const a: Allocation = { pool, block: b.name };
      if (b.ipv4) a.ipv4 = ip.nthAddress(b.ipv4, off);
      if (b.ipv6) a.ipv6 = ip.nthAddress(b.ipv6, off);
      return a;
    }
    return undefined;
  }

  /** Single flight per pool: concurrent callers share one BlockRequest round trip. */
  requestBlock(pool: string): Promise<void> {
    let p = this.inflight.get(pool);
    if (!p) {
      p = this.doRequestBlock(pool).finally(() => this.inflight.delete(pool));
      this.inflight.set(pool, p);
    }
    return p;
  }

  hasInflight(): boolean {
    return this.inflight.size > 0;
  }

  private async doRequestBlock(pool: string): Promise<void> {
    const name = requestName(pool, this.nodeName);
    const node = this.node ?? (this.node = await this.nodeClient.get(this.nodeName));
    // A request left by a previous run (crash) is replaced; a block it got is collected by gc().
    await this.requestClient.delete(name, { ignoreNotFound: true });
    for (let i = 0; i < 50 && (await this.requestClient.find(name)); i++) await sleep(20);
    this.requestsIssued++;
    await this.requestClient.create({
      metadata: {
        name,
        ownerReferences: [
          { apiVersion: 'v1', kind: 'Node', name: this.nodeName, uid: node.metadata.uid!, controller: false, blockOwnerDeletion: false },
        ],
      },
      spec: { nodeName: this.nodeName, poolName: pool },
    });
    try {
      const deadline = Date.now() + this.requestTimeoutMs;
      let wait = 5;
      for (;;) {
        const req = await this.requestClient.get(name);
        const outcome = requestOutcome(req);
        if (outcome?.type === 'Failed') {
          if (outcome.reason === 'PoolNotFound') throw new PoolNotFoundError(pool);
          throw new PoolExhaustedError(pool, outcome.message ?? outcome.reason ?? 'request failed');
        }
        if (outcome?.type === 'Complete' && req.status?.addressBlockName) {
          const b = await this.blockClient.get(req.status.addressBlockName);
          if (b.metadata.labels?.[LABEL_NODE] !== this.nodeName)
            throw new CniError(CniCode.Internal, 'block request answered with a foreign block', b.metadata.name);
          if (!this.ownedIn(pool).some((x) => x.name === b.metadata.name)) {
            const p = await this.poolClient.get(pool);
            const ob = this.addOwned(b, p.spec.blockSizeBits);
            this.log.info('block acquired', { pool, block: ob.name, ipv4: ob.ipv4, ipv6: ob.ipv6 });
            await this.listener.blockAdded(ob);
          }
          return;
        }
        if (Date.now() > deadline)
          throw new TransientError('block request timed out', `${name} not answered in ${this.requestTimeoutMs} ms`);
        await sleep(wait);
        wait = Math.min(wait * 2, 100);
      }
    } finally {
      await this.requestClient.delete(name, { ignoreNotFound: true }).catch(() => undefined);
    }
  }

  /** Frees an address; deletes its block when it was the last one. */
  async free(pool: string, addrs: { ipv4?: string; ipv6?: string }): Promise<void> {
    const hit = this.blockOf(pool, addrs);
    if (!hit) return;
    hit.block.alloc.clear(hit.offset);
    if (hit.block.alloc.count === 0) await this.retire(hit.block);
  }

  private async retire(b: OwnedBlock): Promise<void> {
    b.retired = true;
    const l = this.ownedIn(b.pool).filter((x) => x !== b);
    if (l.length) this.blocks.set(b.pool, l);
    else this.blocks.delete(b.pool);
    this.log.info('block freed', { pool: b.pool, block: b.name });
    try {
      await this.listener.blockRemoved(b);
      await this.deleteBlock(b.name);
    } catch (err) {
      this.log.warn('block deletion failed; gc will retry', { block: b.name, error: err });
    }
  }

  private async deleteBlock(name: string): Promise<void> {
    const cur = await this.blockClient.delete(name, { ignoreNotFound: true });
    const obj = cur ?? (await this.blockClient.find(name));
    if (obj) await removeFinalizer(this.blockClient, obj, FINALIZER);
  }

  /**
   * Deletes the blocks of this node that hold no address: unused ones in the cache, and ones in the API
   * the cache does not know (a request answered after a crash). Skipped while a request is in flight.
   */
  async gc(): Promise<string[]> {
    if (this.hasInflight()) return [];
    const deleted: string[] = [];
    const list = await this.blockClient.listAll({ labelSelector: `${LABEL_NODE}=${this.nodeName}` });
    const known = new Map(this.owned().map((b) => [b.name, b]));
    for (const b of list.items) {
      if (this.hasInflight()) break;
      const ob = known.get(b.metadata.name!);
      if (ob && ob.alloc.count > 0) continue;
      if (ob) await this.retire(ob);
      else {
        try {
          await this.deleteBlock(b.metadata.name!);
        } catch (err) {
          if (!isNotFound(err)) throw err;
        }
      }
      deleted.push(b.metadata.name!);
    }
    return deleted;
  }

  static cidrsOf = blockCidrs;
}

/** Block size bits from the block's own prefix (the pool is gone). */
function blockBits(b: AddressBlock): number {
  if (b.ipv4) return 32 - ip.parseCidr(b.ipv4).prefix;
  return 128 - ip.parseCidr(b.ipv6!).prefix;
}
