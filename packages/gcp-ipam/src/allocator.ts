/**
 * IP allocation in the API server with one IPAllocation object per IP (see types.ts): claim = create the object
 * named from the IP (AlreadyExists: taken, try another), release = delete it with a uid precondition. Candidates
 * are drawn at random from the pool so concurrent nodes rarely pick the same IP; after a few collisions the
 * allocator lists the pool's allocations once and draws from what is free.
 */
import { ip as ipmath, CniError } from '@cnikit/netlib';
import { KubeLite, isAlreadyExists, isNotFound } from '@cnikit/kube/lite';
import {
  ALLOC_PLURAL,
  API_VERSION,
  LABEL_NODE,
  LABEL_POOL,
  POOL_PLURAL,
  allocationName,
  labelValue,
  type IPAllocation,
  type IPAllocationSpec,
  type IPPool,
} from './types';

const BASE = `/apis/${API_VERSION}`;
export const poolPath = (name: string): string => `${BASE}/${POOL_PLURAL}/${encodeURIComponent(name)}`;
export const allocPath = (name?: string): string => `${BASE}/${ALLOC_PLURAL}${name ? `/${encodeURIComponent(name)}` : ''}`;

/** Code 110: no free address in the pool. */
export class PoolExhaustedError extends CniError {
  constructor(pool: string, cidr: string) {
    super(110, 'gcp-ipam: pool exhausted', `IPPool ${pool} (${cidr}) has no free address`);
    this.name = 'PoolExhaustedError';
  }
}

/** Addresses of a pool that are never handed out: network, gateway (base + 1), broadcast. */
export function reservedIps(cidr: string): Set<string> {
  return new Set([ipmath.nthAddress(cidr, 0), ipmath.nthAddress(cidr, 1), ipmath.nthAddress(cidr, -1)]);
}

export function gatewayOf(cidr: string): string {
  return ipmath.nthAddress(cidr, 1);
}

/** Number of addresses handed out at most (size minus network, gateway and broadcast). */
export function capacityOf(cidr: string): number {
  return Math.max(0, Number(ipmath.size(cidr)) - 3);
}

export type Owner = Omit<IPAllocationSpec, 'pool' | 'ip' | 'allocatedAt' | 'phase'>;

export interface ClaimStats {
  attempts: number;
  listed: boolean;
}

export async function getPool(kube: KubeLite, name: string): Promise<IPPool> {
  return kube.request<IPPool>('GET', poolPath(name));
}

function allocationObject(pool: string, ip: string, owner: Owner, extra: Partial<IPAllocationSpec> = {}): IPAllocation {
  return {
    apiVersion: API_VERSION,
    kind: 'IPAllocation',
    metadata: { name: allocationName(pool, ip), labels: { [LABEL_POOL]: labelValue(pool), [LABEL_NODE]: labelValue(owner.nodeName) } },
    spec: { pool, ip, ...owner, allocatedAt: new Date().toISOString(), phase: 'Allocated', ...extra },
  };
}

/** Creates the IPAllocation for ip; undefined when someone holds it already. */
export async function tryClaim(kube: KubeLite, pool: string, ip: string, owner: Owner): Promise<IPAllocation | undefined> {
  try {
    return await kube.request<IPAllocation>('POST', allocPath(), allocationObject(pool, ip, owner));
  } catch (err) {
    if (isAlreadyExists(err)) return undefined;
    throw err;
  }
}

export async function listAllocations(kube: KubeLite, selector: { pool?: string; node?: string }): Promise<IPAllocation[]> {
  const sel = [
    selector.pool ? `${LABEL_POOL}=${labelValue(selector.pool)}` : '',
    selector.node ? `${LABEL_NODE}=${labelValue(selector.node)}` : '',
  ]
    .filter(Boolean)
    .join(',');
  const list = await kube.request<{ items: IPAllocation[] }>(
    'GET',
    `${allocPath()}${sel ? `?labelSelector=${encodeURIComponent(sel)}` : ''}`,
  );
  return list.items.filter((a) => !selector.pool || a.spec.pool === selector.pool);
}

const randomHost = (cidr: string, reserved: Set<string>): string => {
  const size = Number(ipmath.size(cidr));
  for (;;) {
    const cand = ipmath.nthAddress(cidr, 1 + Math.floor(Math.random() * Math.max(1, size - 2)));
    if (!reserved.has(cand)) return cand;
  }
};

/**
 * Claims a free IP of the pool for owner. Random probes first (each one POST), then one list and random picks
 * from the free set, re-listing while others keep taking them.
 */
export async function claim(
  kube: KubeLite,
  pool: IPPool,
  owner: Owner,
  opts: { randomProbes?: number } = {},
): Promise<{ alloc: IPAllocation; stats: ClaimStats }> {
  const cidr = pool.spec.cidr;
  const name = pool.metadata.name;
  const reserved = reservedIps(cidr);
  const stats: ClaimStats = { attempts: 0, listed: false };
  const probes = opts.randomProbes ?? 4;
  for (let i = 0; i < probes && capacityOf(cidr) > 0; i++) {
    stats.attempts++;
    const got = await tryClaim(kube, name, randomHost(cidr, reserved), owner);
    if (got) return { alloc: got, stats };
  }
  for (let round = 0; round < 10; round++) {
    stats.listed = true;
    const taken = new Set((await listAllocations(kube, { pool: name })).map((a) => a.spec.ip));
    const free: string[] = [];
    const size = Number(ipmath.size(cidr));
    if (size - taken.size - reserved.size <= 0) break;
    // walk from a random offset so concurrent callers spread out; stop after collecting a few
    const start = Math.floor(Math.random() * size);
    for (let k = 0; k < size && free.length < 32; k++) {
      const cand = ipmath.nthAddress(cidr, (start + k) % size);
      if (!reserved.has(cand) && !taken.has(cand)) free.push(cand);
    }
    if (free.length === 0) break;
    while (free.length) {
      const cand = free.splice(Math.floor(Math.random() * free.length), 1)[0]!;
      stats.attempts++;
      const got = await tryClaim(kube, name, cand, owner);
      if (got) return { alloc: got, stats };
    }
  }
  throw new PoolExhaustedError(name, cidr);
}

export async function getAllocation(kube: KubeLite, name: string): Promise<IPAllocation | undefined> {
  try {
    return await kube.request<IPAllocation>('GET', allocPath(name));
  } catch (err) {
    if (isNotFound(err)) return undefined;
    throw err;
  }
}

/** PUT with the object's resourceVersion: 409 Conflict when someone changed it since it was read. */
export async function replaceAllocation(kube: KubeLite, alloc: IPAllocation): Promise<IPAllocation> {
  return kube.request<IPAllocation>('PUT', allocPath(alloc.metadata.name), { ...alloc, apiVersion: API_VERSION, kind: 'IPAllocation' });
}

/** Deletes the allocation if it still is the one read (uid + resourceVersion precondition); gone is fine. */
export async function deleteAllocation(kube: KubeLite, alloc: IPAllocation): Promise<void> {
  try {
    await kube.request('DELETE', allocPath(alloc.metadata.name), {
      apiVersion: 'v1',
      kind: 'DeleteOptions',
      preconditions: { uid: alloc.metadata.uid, resourceVersion: alloc.metadata.resourceVersion },
    });
  } catch (err) {
    if (!isNotFound(err)) throw err;
  }
}

/** Writes capacity/allocated/available into the IPPool's status (merge patch: no read, no conflict). */
export async function refreshPoolStatus(kube: KubeLite, pool: IPPool): Promise<IPPool> {
  const allocated = (await listAllocations(kube, { pool: pool.metadata.name })).length;
  const capacity = capacityOf(pool.spec.cidr);
  return kube.request<IPPool>(
    'PATCH',
    `${poolPath(pool.metadata.name)}/status`,
    { status: { capacity, allocated, available: Math.max(0, capacity - allocated), lastUpdated: new Date().toISOString() } },
    'application/merge-patch+json',
  );
}
