/**
 * The agent's address book (pure): hands out IPs from spec.ipam.pool that are neither used nor in a release
 * handshake, and answers the operator's marks. Single-threaded: an answer and an allocation never interleave.
 */
import { ip as ipm } from '@cnikit/netlib';
import type { AllocationIP, CiliumNode, Eni, ReleaseState } from './types';

export interface EniInfo {
  id: string;
  mac: string;
  number: number;
  subnetCidr: string;
  vpcCidrs: string[];
  gateway: string;
}

export interface Lease {
  ip: string;
  owner: string;
  eni: EniInfo;
}

/** An IP of the book as status.ipam.used publishes it: its owner (`<containerID>/<ifname>`) and its ENI's ID. */
export interface UsedIp {
  ip: string;
  owner: string;
  eni: string;
}

export class PoolExhausted extends Error {
  constructor(
    readonly available: number,
    readonly inHandshake: number,
  ) {
    super(
      `ipam: no free IP in spec.ipam.pool (${available} in the pool, ${inHandshake} in a release handshake); the operator has been asked for more`,
    );
    this.name = 'PoolExhausted';
  }
}

export function eniInfo(e: Eni): EniInfo {
  const cidr = e.subnet.cidr ?? '';
  return {
    id: e.id,
    mac: e.mac ?? '',
    number: e.number,
    subnetCidr: cidr,
    vpcCidrs: e.vpc.cidrs?.length ? e.vpc.cidrs : e.vpc['primary-cidr'] ? [e.vpc['primary-cidr']] : [],
    // The VPC router is the subnet's first host (.1).
    gateway: cidr ? ipm.nthAddress(cidr, 1) : '',
  };
}

export class PoolAllocator {
  /** ip -> owner */
  readonly used = new Map<string, AllocationIP>();
  private node: CiliumNode | undefined;

  /** Loads what was published before a restart. */
  restore(used: Record<string, AllocationIP>): void {
    for (const [a, v] of Object.entries(used)) this.used.set(a, v);
  }

  setNode(n: CiliumNode): void {
    this.node = n;
  }

  /** IPs of the pool whose ENI is already described in status.eni.enis (the operator writes both, not atomically). */
  private usable(): string[] {
    const enis = this.node?.status?.eni?.enis ?? {};
    return Object.entries(this.node?.spec.ipam?.pool ?? {})
      .filter(([, v]) => v.resource !== undefined && v.resource in enis)
      .map(([a]) => a);
  }

  get poolSize(): number {
    return this.usable().length;
  }

  private releaseIps(): Record<string, ReleaseState> {
    return this.node?.status?.ipam?.['release-ips'] ?? {};
  }

  /** Free for allocation: in the pool, not used, not in any handshake state (do-not-release is over: it is free). */
  freeIps(): string[] {
    const rel = this.releaseIps();
    return this.usable().filter((a) => !this.used.has(a) && (rel[a] === undefined || rel[a] === 'do-not-release'));
  }

  allocate(owner: string): Lease {
    for (const [a, v] of this.used) if (v.owner === owner) return this.lease(a, owner);
    const free = this.freeIps().sort(ipm.compareIps);
    if (free.length === 0) {
      const rel = Object.values(this.releaseIps()).filter((s) => s !== 'do-not-release').length;
      throw new PoolExhausted(this.poolSize, rel);
    }
    const a = free[0];
    this.used.set(a, { owner, resource: this.node!.spec.ipam!.pool![a].resource });
    return this.lease(a, owner);
  }

  private lease(a: string, owner: string): Lease {
    const resource = this.used.get(a)?.resource ?? this.node?.spec.ipam?.pool?.[a]?.resource ?? '';
    const e = this.node?.status?.eni?.enis?.[resource];
    if (!e) throw new Error(`ipam: ${a} belongs to ENI ${resource}, not in status.eni.enis yet`);
    return { ip: a, owner, eni: eniInfo(e) };
  }

  /** The lease `owner` holds, if any (CHECK). */
  holding(owner: string): Lease | undefined {
    for (const [a, v] of this.used) if (v.owner === owner) return this.lease(a, owner);
    return undefined;
  }

  /** GC: frees every IP whose owner is not in `keep`; returns them. */
  releaseExcept(keep: ReadonlySet<string>): string[] {
    const out: string[] = [];
    for (const [a, v] of this.used)
      if (!keep.has(v.owner ?? '')) {
        this.used.delete(a);
        out.push(a);
      }
    return out;
  }

  /** Frees every IP of `owner`; returns them. Unknown owners are fine (DEL is idempotent). */
  release(owner: string): string[] {
    const out: string[] = [];
    for (const [a, v] of this.used)
      if (v.owner === owner) {
        this.used.delete(a);
        out.push(a);
      }
    return out;
  }

  /**
   * The agent's side of the handshake, as a new release-ips map (undefined = nothing to change):
   * marked -> ready (unused) or do-not-release (used); released -> entry removed once the IP left the pool.
   */
  answerHandshake(): Record<string, ReleaseState> | undefined {
    const rel = this.releaseIps();
    const pool = this.node?.spec.ipam?.pool ?? {};
    const out: Record<string, ReleaseState> = { ...rel };
    let changed = false;
    for (const [a, s] of Object.entries(rel)) {
      if (s === 'marked-for-release') {
        out[a] = this.used.has(a) ? 'do-not-release' : 'ready-for-release';
        changed = true;
      } else if (s === 'released' && !(a in pool)) {
        delete out[a];
        changed = true;
      }
    }
    return changed ? out : undefined;
  }

  usedRecord(): Record<string, AllocationIP> {
    return Object.fromEntries([...this.used].sort(([a], [b]) => ipm.compareIps(a, b)));
  }

  /** Every IP handed out, by IP (the `leases` op): the book itself, so it holds what no ENI describes yet too. */
  usedIps(): UsedIp[] {
    return Object.entries(this.usedRecord()).map(([ip, v]) => ({ ip, owner: v.owner ?? '', eni: v.resource ?? '' }));
  }
}
