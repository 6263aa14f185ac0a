/**
 * The operator's work for one CiliumNode: read the instance's ENIs from EC2, publish them as the pool,
 * allocate up to the watermark (assign on an ENI with room, else create + attach a new ENI), and run the
 * operator side of the release handshake. Pure of Kubernetes: takes the node, returns what to write.
 */
import { ip as ipm } from '@cnikit/netlib';
import { Ec2Error, type Ec2Api, type Ec2Eni, type Ec2Subnet, type Ec2Vpc } from './ec2';
import { maxUsableIps, type InstanceLimits, type LimitsTable } from './limits';
import { planAllocation, type AllocationPlan, type NodeIpamParams } from './prealloc';
import { matchesTags, selectSubnet } from './subnets';
import {
  DEFAULT_MAX_ABOVE_WATERMARK,
  DEFAULT_PRE_ALLOCATE,
  type AllocationIP,
  type CiliumNode,
  type Eni,
  type EniSpec,
  type ReleaseState,
} from './types';

export const TAG_CLUSTER = 'io.cilium/cluster-name';
export const TAG_MANAGED = 'io.cilium/cilium-managed';
const PREFIX_LEN = 28;
const PREFIX_IPS = 16;

export interface NodeSyncOptions {
  clusterName: string;
  limits: LimitsTable;
  /** Release excess IPs through the handshake (Cilium's --aws-release-excess-ips). Default false. */
  releaseExcess?: boolean;
  /** How long an IP must stay in excess before it is marked. Default 180 s. */
  excessDelayMs?: number;
  /** Actions (assign/create) per sync before handing the node back. Default 4. */
  maxActions?: number;
  now?: () => number;
  /** A clean-up call that failed (an ENI that could not be deleted after a failed attach): log and count it. */
  onCleanupError?: (operation: string, id: string, err: unknown) => void;
}

export interface NodeSyncResult {
  pool: Record<string, AllocationIP>;
  enis: Record<string, Eni>;
  releaseIps: Record<string, ReleaseState>;
  plan: AllocationPlan;
  error?: string;
  /** Resync soon (handshake in flight, or allocation left unfinished). */
  again: boolean;
  actions: string[];
}

/**
 * Caches subnets/VPCs for a minute (Cilium's instances cache). An allocation marks subnets stale; a stale
 * cache is refreshed at most once per second across all nodes (Cilium: "at most once per second").
 */
export class Ec2Cache {
  private subnets?: { at: number; v: Promise<Ec2Subnet[]> };
  private vpcs?: { at: number; v: Promise<Ec2Vpc[]> };
  private stale = false;
  constructor(
    private readonly ec2: Ec2Api,
    private readonly ttlMs = 60_000,
    private readonly minRefreshMs = 1000,
  ) {}
  getSubnets(): Promise<Ec2Subnet[]> {
    const age = this.subnets ? Date.now() - this.subnets.at : Infinity;
    if (age > this.ttlMs || (this.stale && age > this.minRefreshMs)) {
      const v = this.ec2.describeSubnets();
      this.subnets = { at: Date.now(), v };
      this.stale = false;
      v.catch(() => {
        this.subnets = undefined;
      });
    }
    return this.subnets!.v;
  }
  getVpcs(): Promise<Ec2Vpc[]> {
    if (!this.vpcs || Date.now() - this.vpcs.at > this.ttlMs) {
      const v = this.ec2.describeVpcs();
      this.vpcs = { at: Date.now(), v };
      v.catch(() => {
        this.vpcs = undefined;
      });
    }
    return this.vpcs.v;
  }
  invalidateSubnets(): void {
    this.stale = true;
  }
  /**
   * Books addresses taken by an allocation against the cached subnet, so that subnet choice stays right
   * without a DescribeSubnets after every allocation; the 60 s refresh corrects any drift.
   */
  consume(subnetId: string, n: number): void {
    void this.subnets?.v.then(
      (list) => {
        const s = list.find((x) => x.id === subnetId);
        if (s) s.availableAddresses = Math.max(0, s.availableAddresses - n);
      },
      () => undefined,
    );
  }
}

export function ipamParams(node: CiliumNode): NodeIpamParams {
  const i = node.spec.ipam ?? {};
  return {
    preAllocate: i['pre-allocate'] ?? DEFAULT_PRE_ALLOCATE,
    minAllocate: i['min-allocate'] ?? 0,
    maxAllocate: i['max-allocate'] ?? 0,
    maxAboveWatermark: i['max-above-watermark'] ?? DEFAULT_MAX_ABOVE_WATERMARK,
  };
}

export function instanceIdOf(node: CiliumNode): string | undefined {
  return node.spec['instance-id'] || node.spec.eni?.['instance-id'] || undefined;
}

/** A MAC as the kernel prints it; emulators sometimes answer garbage, then one is derived from the ENI id. */
export function normalizeMac(mac: string, eniId: string): string {
  if (/^[0-9a-f]{2}(:[0-9a-f]{2}){5}$/i.test(mac)) return mac.toLowerCase();
  const hex = eniId
    .replace(/[^0-9a-f]/gi, '')
    .padStart(10, '0')
    .slice(-10);
  return `02:${hex.match(/../g)!.join(':')}`.toLowerCase();
}

export function prefixIps(prefix: string): string[] {
  const n = Number(ipm.size(prefix));
  return Array.from({ length: n }, (_, k) => ipm.nthAddress(prefix, k));
}

/** Per-node memory of the operator: when each IP became excess (for the 180 s delay), ENIs in flight. */
export interface NodeMemory {
  excessSince: Map<string, number>;
  /** ENIs this operator created for the node, not yet seen attached in a describe. */
  pendingEnis: Map<string, number>;
}
export const newMemory = (): NodeMemory => ({ excessSince: new Map(), pendingEnis: new Map() });

export class NodeSyncer {
  readonly cache: Ec2Cache;
  constructor(
    private readonly ec2: Ec2Api,
    private readonly opts: NodeSyncOptions,
  ) {
    this.cache = new Ec2Cache(ec2);
  }

  private now(): number {
    return (this.opts.now ?? Date.now)();
  }

  async sync(node: CiliumNode, mem: NodeMemory, pendingPods = 0): Promise<NodeSyncResult> {
    const actions: string[] = [];
    const releaseIps: Record<string, ReleaseState> = { ...(node.status?.ipam?.['release-ips'] ?? {}) };
    const start = await this.begin(node, mem, actions);
    if ('error' in start) {
      const failed = failedSync(node, releaseIps, actions, start.error);
      // A terminated instance holds nothing any more: its pool and ENIs are published empty.
      return start.instanceGone ? { ...failed, pool: {}, enis: {} } : failed;
    }
    const c = start.ctx;
    const used = node.status?.ipam?.used ?? {};
    const params = ipamParams(node);

    const plan = planAllocation(params, Object.keys(this.nodeView(c).pool).length, Object.keys(used).length, pendingPods);
    const allocated = await this.allocate(c, plan.toAllocate);
    let error = allocated.error;
    const { pool, enis } = this.nodeView(c);
    const available = Object.keys(pool).length;
    const capacity = maxUsableIps(c.limits, c.firstIndex) * (c.usePD ? PREFIX_IPS : 1);
    if (allocated.remaining > 0 && !error && available >= capacity) error = `node at capacity: ${available}/${capacity} IPs`;

    // Release handshake (operator side).
    let again = allocated.remaining > 0 && !error;
    const excessNow = planAllocation(params, available, Object.keys(used).length, pendingPods).excess;
    dropSettledReleases(releaseIps, pool, mem);
    if (this.opts.releaseExcess) {
      const released = await this.releaseExcess(c, { releaseIps, pool, used, excessNow });
      if (released.error !== undefined) error = released.error;
      if (released.again) again = true;
    }
    return { pool, enis, releaseIps, plan, error, again, actions };
  }

  /**
   * Checks the node can be served and reads its instance from EC2. When EC2 cannot be reached the sync ends
   * here, with the error in the node's operator-status (as Cilium shows it), not as an exception before any
   * status is written.
   */
  private async begin(
    node: CiliumNode,
    mem: NodeMemory,
    actions: string[],
  ): Promise<{ ctx: SyncContext } | { error: string; instanceGone?: boolean }> {
    const instanceId = instanceIdOf(node);
    if (!instanceId) return { error: 'spec.instance-id is empty: the agent has not published its instance' };
    const eniSpec = node.spec.eni ?? {};
    const limits = this.opts.limits.get(eniSpec['instance-type']);
    if (!limits)
      return {
        error: `instance type ${JSON.stringify(eniSpec['instance-type'])} is not in the limits table (override with --instance-limits)`,
      };
    let attached: Ec2Eni[];
    let vpcs: Ec2Vpc[];
    try {
      attached = await this.ec2.describeNetworkInterfaces({ instanceId });
      if (attached.length === 0) {
        const inst = await this.ec2.describeInstance(instanceId);
        if (!inst || inst.state === 'terminated' || inst.state === 'shutting-down') {
          return { error: `instance ${instanceId} is ${inst?.state ?? 'gone'}`, instanceGone: true };
        }
      }
      vpcs = await this.cache.getVpcs();
      this.subnetList = await this.cache.getSubnets();
    } catch (e) {
      return { error: `EC2: ${e instanceof Error ? e.message : String(e)}` };
    }
    for (const e of attached) mem.pendingEnis.delete(e.id);
    const usePD = eniSpec['use-prefix-delegation'] === true && limits.hypervisor === 'nitro';
    const firstIndex = eniSpec['first-interface-index'] ?? 0;
    return { ctx: { node, instanceId, eniSpec, limits, firstIndex, usePD, attached, vpcs, mem, actions } };
  }

  /** An ENI whose addresses go to the pool: at or above first-interface-index, and not excluded by its tags. */
  private usable(c: SyncContext, e: Ec2Eni): boolean {
    return (e.deviceIndex ?? 0) >= c.firstIndex && !matchesTags(e.tags, c.eniSpec['exclude-interface-tags']);
  }

  /** The node's status as the ENIs stand now: every ENI, and the pool of the usable ones' addresses. */
  private nodeView(c: SyncContext): { pool: Record<string, AllocationIP>; enis: Record<string, Eni> } {
    const pool: Record<string, AllocationIP> = {};
    const enis: Record<string, Eni> = {};
    for (const e of c.attached) {
      const vpc = c.vpcs.find((v) => v.id === e.vpcId);
      enis[e.id] = {
        id: e.id,
        ip: e.ip,
        mac: normalizeMac(e.mac, e.id),
        number: e.deviceIndex ?? 0,
        subnet: { id: e.subnetId, cidr: this.subnetCidr(e.subnetId) },
        vpc: { id: e.vpcId, 'primary-cidr': vpc?.primaryCidr, cidrs: vpc?.cidrs ?? (vpc ? [vpc.primaryCidr] : []) },
        addresses: e.addresses,
        prefixes: e.prefixes,
        'security-groups': e.securityGroups,
        tags: e.tags,
        description: e.description,
      };
      if (!this.usable(c, e)) continue;
      const ips = [...e.addresses, ...e.prefixes.flatMap(prefixIps)];
      if (c.eniSpec['use-primary-address'] && e.ip) ips.push(e.ip);
      for (const a of ips) pool[a] = { resource: e.id };
    }
    return { pool, enis };
  }

  /** Up to maxActions EC2 actions towards `toAllocate` IPs; stops at the first that gains nothing or fails. */
  private async allocate(c: SyncContext, toAllocate: number): Promise<{ remaining: number; error?: string }> {
    const maxActions = this.opts.maxActions ?? 4;
    let remaining = toAllocate;
    for (let n = 0; remaining > 0 && n < maxActions; n++) {
      try {
        const got = await this.allocateOnce(c, remaining);
        if (got === 0)
          return {
            remaining,
            error: `node ${c.node.metadata.name} cannot take more IPs: ENIs and subnets at capacity (needed ${remaining})`,
          };
        remaining -= got;
      } catch (e) {
        return { remaining, error: e instanceof Error ? e.message : String(e) };
      }
    }
    return { remaining };
  }

  /**
   * The operator's side of the release handshake: marks IPs in excess for longer than the delay, and
   * unassigns those the agent agreed to give up. `again`: a mark is waiting for its delay or for the agent.
   */
  private async releaseExcess(
    c: SyncContext,
    s: { releaseIps: Record<string, ReleaseState>; pool: Record<string, AllocationIP>; used: Record<string, unknown>; excessNow: number },
  ): Promise<{ again: boolean; error?: string }> {
    const { releaseIps, pool, used } = s;
    let again = false;
    if (s.excessNow <= 0) {
      c.mem.excessSince.clear();
      // Abort marks that are no longer excess (the agent has not agreed yet).
      for (const [ipAddr, st] of Object.entries(releaseIps)) if (st === 'marked-for-release') delete releaseIps[ipAddr];
    } else again = this.markExcess(c, s);
    // Agent agreed: unassign, grouped by ENI.
    const ready = Object.entries(releaseIps)
      .filter(([a, st]) => st === 'ready-for-release' && a in pool && !(a in used))
      .map(([a]) => a);
    const byEni = new Map<string, string[]>();
    for (const a of ready) byEni.set(pool[a].resource!, [...(byEni.get(pool[a].resource!) ?? []), a]);
    let error: string | undefined;
    for (const [eniId, ips] of byEni) {
      try {
        await this.unassign(c, eniId, ips, releaseIps, pool);
      } catch (err) {
        error = err instanceof Error ? err.message : String(err);
      }
    }
    if (Object.values(releaseIps).some((st) => st === 'marked-for-release')) again = true;
    return { again, error };
  }

  /** Marks for release the free IPs in excess for excessDelayMs; true while some still wait for their delay. */
  private markExcess(
    c: SyncContext,
    s: { releaseIps: Record<string, ReleaseState>; pool: Record<string, AllocationIP>; used: Record<string, unknown>; excessNow: number },
  ): boolean {
    const { releaseIps, used } = s;
    const { mem } = c;
    const handshaking = Object.values(releaseIps).filter((st) => st === 'marked-for-release' || st === 'ready-for-release').length;
    // Free IPs, none in a handshake (addresses of a prefix are released only with their prefix).
    const free = Object.keys(s.pool).filter((a) => !(a in used) && !(a in releaseIps) && !this.inPrefix(a, c.attached));
    const toMark = Math.max(0, s.excessNow - handshaking);
    // The numerically highest free IPs: the agent hands out the lowest first (pool.ts), so the two
    // ends never race for one address (a plain string sort put .5-.9 after .10-.18, under the agent's picks).
    const cands = free.sort(ipm.compareIps).slice(-toMark || free.length);
    const t = this.now();
    const keep = new Set(toMark > 0 ? cands : []);
    for (const k of [...mem.excessSince.keys()]) if (!keep.has(k)) mem.excessSince.delete(k);
    let waiting = false;
    for (const a of keep) {
      const since = mem.excessSince.get(a) ?? t;
      mem.excessSince.set(a, since);
      if (t - since >= (this.opts.excessDelayMs ?? 180_000)) {
        releaseIps[a] = 'marked-for-release';
        mem.excessSince.delete(a);
      } else waiting = true;
    }
    return waiting;
  }

  private async unassign(
    c: SyncContext,
    eniId: string,
    ips: string[],
    releaseIps: Record<string, ReleaseState>,
    pool: Record<string, AllocationIP>,
  ): Promise<void> {
    await this.ec2.unassignPrivateIpAddresses(eniId, ips);
    c.actions.push(`unassign ${ips.length} from ${eniId}`);
    const e = c.attached.find((x) => x.id === eniId);
    if (e) e.addresses = e.addresses.filter((a) => !ips.includes(a));
    for (const a of ips) {
      releaseIps[a] = 'released';
      delete pool[a];
    }
  }

  private subnetList: Ec2Subnet[] = [];
  private subnetCidr(id: string): string | undefined {
    return this.subnetList.find((s) => s.id === id)?.cidr;
  }
  private inPrefix(a: string, enis: Ec2Eni[]): boolean {
    return enis.some((e) => e.prefixes.some((p) => ipm.contains(p, a)));
  }

  /**
   * Rolls back an ENI this sync created but could not attach. A failure here leaves a dangling ENI (the ENI
   * GC deletes it later): it is reported, never dropped, and the allocation error stays the sync's error.
   */
  private async deleteCreatedEni(id: string): Promise<void> {
    try {
      await this.ec2.deleteNetworkInterface(id);
    } catch (err) {
      this.opts.onCleanupError?.('DeleteNetworkInterface', id, err);
    }
  }

  /** One EC2 allocation action; returns the number of IPs gained (0 = nothing possible). */
  private async allocateOnce(c: SyncContext, want: number): Promise<number> {
    const withRoom = c.attached
      .filter((e) => this.usable(c, e) && slotsOf(c.limits, e) > 0)
      .sort((a, b) => slotsOf(c.limits, b) - slotsOf(c.limits, a) || (a.deviceIndex ?? 0) - (b.deviceIndex ?? 0));
    if (withRoom.length > 0) return this.assignOn(c, withRoom[0], want);
    return this.createEni(c, want);
  }

  /** Addresses on the ENI with the most room: /28 prefixes when delegating (falling back to /32s), else /32s. */
  private async assignOn(c: SyncContext, e: Ec2Eni, want: number): Promise<number> {
    if (c.usePD) {
      const got = await this.assignPrefixes(c, e, want);
      if (got !== undefined) return got;
    }
    const count = Math.min(slotsOf(c.limits, e), want);
    const got = (await this.ec2.assignPrivateIpAddresses(e.id, count)).filter((a) => a !== e.ip && !e.addresses.includes(a));
    e.addresses.push(...got);
    c.actions.push(`assign ${got.length} on ${e.id}`);
    this.cache.consume(e.subnetId, got.length);
    return got.length;
  }

  /** IPs gained through prefixes, or undefined to fall back to /32s (nothing returned, or a refusal EC2 documents). */
  private async assignPrefixes(c: SyncContext, e: Ec2Eni, want: number): Promise<number | undefined> {
    const count = Math.min(slotsOf(c.limits, e), Math.ceil(want / PREFIX_IPS));
    try {
      const prefixes = (await this.ec2.assignPrefixes(e.id, count)).filter((p) => !e.prefixes.includes(p));
      if (prefixes.length > 0) {
        e.prefixes.push(...prefixes);
        this.cache.consume(e.subnetId, prefixes.length * PREFIX_IPS);
        c.actions.push(`assign ${prefixes.length} prefixes on ${e.id}`);
        return prefixes.length * PREFIX_IPS;
      }
      c.actions.push(`prefix assignment on ${e.id} returned nothing: falling back to /32`);
    } catch (err) {
      if (!(err instanceof Ec2Error) || !PREFIX_FALLBACK_CODES.includes(err.code)) throw err;
      c.actions.push(`prefix assignment on ${e.id} failed (${err.code}): falling back to /32`);
    }
    return undefined;
  }

  /** A new ENI, created and attached: only while the instance has a free slot. */
  private async createEni(c: SyncContext, want: number): Promise<number> {
    const { attached, mem, limits, eniSpec } = c;
    // ENIs created but not seen yet count against the slots (no endless creation).
    const inFlight = [...mem.pendingEnis.keys()].filter((id) => !attached.some((e) => e.id === id)).length;
    if (attached.length + inFlight >= limits.adapters) return 0;
    const subnet = await this.subnetFor(c);
    const groups = await this.securityGroupsFor(c);
    const perEni = limits.ipv4 - 1;
    const prefixCount = c.usePD ? Math.min(perEni, Math.ceil(want / PREFIX_IPS)) : 0;
    const eni = await this.ec2.createNetworkInterface({
      subnetId: subnet.id,
      securityGroups: groups,
      description: `Cilium-CNI (${c.instanceId})`,
      tags: { [TAG_CLUSTER]: this.opts.clusterName, [TAG_MANAGED]: 'true' },
      secondaryCount: c.usePD ? 0 : Math.min(want, perEni, subnet.availableAddresses - 1),
      prefixCount,
    });
    mem.pendingEnis.set(eni.id, this.now());
    this.cache.consume(subnet.id, 1 + eni.addresses.length + eni.prefixes.length * PREFIX_IPS);
    const attachment = await this.attachAtFreeIndex(c, eni.id);
    if (!attachment) {
      await this.deleteCreatedEni(eni.id);
      mem.pendingEnis.delete(eni.id);
      return 0;
    }
    const { attachmentId, index } = attachment;
    if (eniSpec['delete-on-termination'] !== false) await this.ec2.setDeleteOnTermination(eni.id, attachmentId);
    eni.deviceIndex = index;
    eni.attachmentId = attachmentId;
    eni.instanceId = c.instanceId;
    eni.addresses = eni.addresses.filter((a) => a !== eni.ip);
    attached.push(eni);
    mem.pendingEnis.delete(eni.id);
    c.actions.push(
      `create ${eni.id} in ${subnet.id} at index ${index} with ${c.usePD ? `${eni.prefixes.length} prefixes` : `${eni.addresses.length} IPs`}`,
    );
    if (c.usePD && eni.prefixes.length === 0 && prefixCount > 0) {
      // The emulator or EC2 handed out no prefix: fill the ENI with /32s instead.
      const got = await this.ec2.assignPrivateIpAddresses(eni.id, Math.min(want, perEni));
      eni.addresses.push(...got.filter((a) => a !== eni.ip && !eni.addresses.includes(a)));
      c.actions.push(`prefix creation returned nothing: ${eni.addresses.length} /32s on ${eni.id}`);
    }
    return eni.addresses.length + eni.prefixes.length * PREFIX_IPS;
  }

  /** The subnet for a new ENI; none fitting re-reads subnets on the next sync (at most once a second) before concluding for good. */
  private async subnetFor(c: SyncContext): Promise<Ec2Subnet> {
    const { eniSpec, attached } = c;
    const subnet = selectSubnet(await this.cache.getSubnets(), {
      ...eniSpec,
      'vpc-id': eniSpec['vpc-id'] ?? attached[0]?.vpcId,
      'node-subnet-id': eniSpec['node-subnet-id'] ?? attached.find((e) => e.deviceIndex === 0)?.subnetId,
    });
    if (subnet) return subnet;
    this.cache.invalidateSubnets();
    throw new Error(
      `no subnet with free addresses matches node ${c.node.metadata.name} (vpc ${eniSpec['vpc-id']}, az ${eniSpec['availability-zone']})`,
    );
  }

  /** The ENI spec's groups, else those its tags select, else the primary ENI's. */
  private async securityGroupsFor(c: SyncContext): Promise<string[]> {
    const { eniSpec } = c;
    let groups = eniSpec['security-groups'] ?? [];
    if (groups.length === 0 && Object.keys(eniSpec['security-group-tags'] ?? {}).length > 0)
      groups = await this.ec2.describeSecurityGroups(eniSpec['security-group-tags']!);
    if (groups.length === 0) groups = c.attached.find((e) => e.deviceIndex === 0)?.securityGroups ?? [];
    return groups;
  }

  /**
   * Attaches at the lowest free device index (three tries: an index taken behind our back moves to the next);
   * undefined when no index is left. Any other failure deletes the ENI and throws.
   */
  private async attachAtFreeIndex(c: SyncContext, eniId: string): Promise<{ attachmentId: string; index: number } | undefined> {
    const taken = new Set(c.attached.map((e) => e.deviceIndex ?? 0));
    let index = Math.max(c.firstIndex, 1);
    for (let tries = 0; tries < 3; tries++) {
      while (taken.has(index)) index++;
      if (index >= c.limits.adapters) return undefined;
      try {
        const attachmentId = await this.ec2.attachNetworkInterface(eniId, c.instanceId, index);
        if (attachmentId) return { attachmentId, index };
      } catch (err) {
        if (
          err instanceof Ec2Error &&
          /InvalidParameterValue|AttachmentLimitExceeded|index/i.test(`${err.code} ${err.message}`) &&
          tries < 2
        ) {
          taken.add(index);
          continue;
        }
        await this.deleteCreatedEni(eniId);
        c.mem.pendingEnis.delete(eniId);
        throw err;
      }
    }
    return undefined;
  }
}

/** Prefix refusals after which /32s are tried instead. */
const PREFIX_FALLBACK_CODES = [
  'InsufficientCidrBlocks',
  'InsufficientFreeAddressesInSubnet',
  'InvalidParameterValue',
  'UnsupportedOperation',
];

/** Free address slots of an ENI (a prefix takes one slot, like an address; the primary IP takes one). */
const slotsOf = (limits: InstanceLimits, e: Ec2Eni): number => limits.ipv4 - 1 - e.addresses.length - e.prefixes.length;

/** What one sync knows about the node and its instance, shared by its steps. */
interface SyncContext {
  node: CiliumNode;
  instanceId: string;
  eniSpec: EniSpec;
  limits: InstanceLimits;
  firstIndex: number;
  usePD: boolean;
  /** The instance's ENIs as EC2 listed them, updated by this sync's own actions. */
  attached: Ec2Eni[];
  vpcs: Ec2Vpc[];
  mem: NodeMemory;
  actions: string[];
}

/** A sync that could not run: the node's pool and ENIs are kept as published, with the error. */
function failedSync(node: CiliumNode, releaseIps: Record<string, ReleaseState>, actions: string[], error: string): NodeSyncResult {
  return {
    pool: node.spec.ipam?.pool ?? {},
    enis: node.status?.eni?.enis ?? {},
    releaseIps,
    error,
    again: false,
    actions,
    plan: { needed: 0, surge: 0, excess: 0, toAllocate: 0 },
  };
}

/** Forgets release states of IPs no longer in the pool (unless released) and those the agent refused (do-not-release). */
function dropSettledReleases(releaseIps: Record<string, ReleaseState>, pool: Record<string, AllocationIP>, mem: NodeMemory): void {
  for (const [ipAddr, state] of Object.entries(releaseIps)) {
    if (!(ipAddr in pool) && state !== 'released') {
      delete releaseIps[ipAddr];
      continue;
    }
    if (state === 'do-not-release') {
      delete releaseIps[ipAddr];
      mem.excessSince.delete(ipAddr);
    }
  }
}

export const PREFIX = { len: PREFIX_LEN, ips: PREFIX_IPS };
