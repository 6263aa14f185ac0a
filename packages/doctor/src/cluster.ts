/**
 * `doctor cluster`: what no single node can see.
 *   - Coil's address blocks against the cluster's Nodes. A block whose node is gone holds addresses no pod can
 *     get: Coil's controller deletes it when it sees the Node go, or at its hourly GC, but while the controller
 *     is down (or was during the deletion) the pool runs dry (Coil #271, #347; Cilium #46598 is the same pain
 *     with CIDRs).
 *   - Each pool's blocks in use against its capacity, and per node.
 *   - gcp-ipam's IPAllocations (one per address) whose pod is gone: the address stays out of the pool, its alias
 *     on the instance, until gcp-ipam's GC on that node (doctor node --gc there) releases both. An allocation
 *     kept for a live migration's destination (movingOut, or Migrating) is not leaked.
 *   - Pod addresses held by two live pods (Running, not being deleted; a deleted pod's status keeps its address
 *     for a while after its sandbox is gone, so it does not count).
 * Pure: cluster-api.ts reads the facts and deletes the blocks.
 */

export interface PoolFacts {
  name: string;
  blockSizeBits: number;
  subnets: { ipv4?: string; ipv6?: string }[];
}

export interface BlockFacts {
  name: string;
  pool: string;
  node: string;
  ipv4?: string;
  ipv6?: string;
}

export interface PodAddresses {
  /** namespace/name */
  pod: string;
  uid?: string;
  node: string;
  ips: string[];
}

/** A gcp-ipam IPAllocation: the claim of one address for one pod. */
export interface AllocationFacts {
  name: string;
  pool: string;
  ip: string;
  /** namespace/name */
  pod: string;
  podUID: string;
  node: string;
  /** Kept for a live migration's destination (spec.movingOut, or phase Migrating). */
  migrating: boolean;
}

export interface ClusterFacts {
  nodes: string[];
  /** Undefined when the cluster has no Coil (no AddressPool CRD). */
  pools?: PoolFacts[];
  blocks: BlockFacts[];
  /** Every pod that exists (any phase): what an allocation's pod is looked up in. */
  pods: PodAddresses[];
  /** gcp-ipam's allocations; undefined when the cluster has no gcp-ipam (no IPAllocation CRD). */
  allocations?: AllocationFacts[];
}

export interface PoolRow {
  pool: string;
  blocks: number;
  capacity: number;
  byNode: Record<string, number>;
}

export interface ClusterReport {
  coil: boolean;
  pools: PoolRow[];
  /** Blocks whose node is gone. */
  leakedBlocks: BlockFacts[];
  gcpIpam: boolean;
  /** gcp-ipam allocations whose pod is gone (by UID). */
  leakedAllocations: (AllocationFacts & { why: string })[];
  conflicts: { ip: string; pods: string[] }[];
}

/** Blocks a subnet holds: 2^(host bits - blockSizeBits); a dual-stack subnet counts once (its families pair up). */
export function poolCapacity(p: PoolFacts): number {
  return p.subnets.reduce((n, s) => {
    const [cidr, bits] = s.ipv4 ? [s.ipv4, 32] : [s.ipv6 ?? '', 128];
    const prefix = Number(cidr.split('/')[1]);
    const hostBits = bits - prefix - p.blockSizeBits;
    return Number.isFinite(prefix) && hostBits >= 0 ? n + 2 ** hostBits : n;
  }, 0);
}

function conflicts(pods: PodAddresses[]): ClusterReport['conflicts'] {
  const holders = new Map<string, string[]>();
  for (const p of pods) for (const ip of p.ips) holders.set(ip, [...(holders.get(ip) ?? []), p.pod]);
  return [...holders]
    .filter(([, names]) => names.length > 1)
    .map(([ip, names]) => ({ ip, pods: names.sort() }))
    .sort((a, b) => (a.ip < b.ip ? -1 : 1));
}

/** Allocations whose pod (that UID) exists no more, and no migration waits for them. */
function leakedAllocations(f: ClusterFacts): ClusterReport['leakedAllocations'] {
  const uids = new Map(f.pods.map((p) => [p.pod, p.uid]));
  return (f.allocations ?? [])
    .filter((a) => !a.migrating && uids.get(a.pod) !== a.podUID)
    .map((a) => ({ ...a, why: uids.has(a.pod) ? `pod ${a.pod} is another pod now (uid ${uids.get(a.pod)})` : `pod ${a.pod} is gone` }))
    .sort((a, b) => (a.name < b.name ? -1 : 1));
}

export function judgeCluster(f: ClusterFacts): ClusterReport {
  const nodes = new Set(f.nodes);
  const pools = (f.pools ?? []).map((p) => {
    const mine = f.blocks.filter((b) => b.pool === p.name);
    const byNode: Record<string, number> = {};
    for (const b of mine) byNode[b.node] = (byNode[b.node] ?? 0) + 1;
    return { pool: p.name, blocks: mine.length, capacity: poolCapacity(p), byNode };
  });
  return {
    coil: f.pools !== undefined,
    pools,
    leakedBlocks: f.blocks.filter((b) => !nodes.has(b.node)).sort((a, b) => (a.name < b.name ? -1 : 1)),
    gcpIpam: f.allocations !== undefined,
    leakedAllocations: leakedAllocations(f),
    conflicts: conflicts(f.pods.filter((p) => p.ips.length)),
  };
}

export const clusterHealthy = (r: ClusterReport): boolean =>
  r.leakedBlocks.length === 0 && r.leakedAllocations.length === 0 && r.conflicts.length === 0;

export function formatCluster(r: ClusterReport): string {
  const out: string[] = [];
  if (!r.coil) out.push('Coil: not installed (no AddressPool CRD)');
  for (const p of r.pools) {
    const nodes = Object.entries(p.byNode)
      .sort()
      .map(([n, c]) => `${n} ${c}`)
      .join(', ');
    out.push(`pool ${p.pool}: ${p.blocks}/${p.capacity} blocks in use${nodes ? ` (${nodes})` : ''}`);
  }
  for (const b of r.leakedBlocks)
    out.push(`leaked   block ${b.name} (pool ${b.pool}, ${[b.ipv4, b.ipv6].filter(Boolean).join(' ')}): node ${b.node} is gone`);
  for (const a of r.leakedAllocations)
    out.push(`leaked   allocation ${a.name} (pool ${a.pool}, ${a.ip} on ${a.node}): ${a.why}; doctor node --gc on ${a.node} releases it`);
  for (const c of r.conflicts) out.push(`conflict ${c.ip} held by ${c.pods.join(', ')}`);
  const allocations = r.gcpIpam ? `, ${r.leakedAllocations.length} leaked gcp-ipam allocations` : '';
  out.push(`${r.leakedBlocks.length} leaked blocks${allocations}, ${r.conflicts.length} conflicting addresses`);
  return `${out.join('\n')}\n`;
}
