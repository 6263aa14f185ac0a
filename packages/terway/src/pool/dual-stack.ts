/**
 * Dual stack (`ip_stack: dual`) for the ENI multi-IP pool: every pod lease
 * gets an IPv6 address on the same ENI as its IPv4 one. The IPv4 pool stays
 * the one that decides ENIs and sizes; IPv6 follows it per ENI:
 *
 * - when the pool gets IPv4s on an ENI (a new ENI, AssignPrivateIpAddresses),
 *   as many IPv6s are assigned on it in the background, so a warm pool is warm
 *   for both families (an ADD then makes no cloud call);
 * - a pod's IPv6 comes from the ENI's idle IPv6 addresses, else it waits for
 *   the assignment in flight, else makes one AssignIpv6Addresses call;
 * - on release the IPv6 stays on the ENI, idle, for the next pod there (the
 *   same key gets its own back, as sticky IPv4s do);
 * - when the pool returns IPv4s of an ENI (`ips-released`), as many idle IPv6s
 *   of that ENI are unassigned, so an ENI never holds more IPv6 than IPv4;
 *   a deleted ENI takes its IPv6s with it.
 *
 * A failed IPv6 assignment fails the AllocIP with code 11 and gives the IPv4 back.
 */
import { TransientError } from '@cnikit/netlib';
import type { EniIpPool, PoolEvent } from './pool';
import type { EniInfo, IpLease } from './types';

export interface Ipv6Cloud {
  assignIpv6s(eniId: string, count: number): Promise<string[]>;
  unassignIpv6s(eniId: string, ips: string[]): Promise<void>;
  /** The vSwitch's IPv6 CIDR (undefined: IPv6 off there). */
  ipv6CidrOf(vswitchId: string): Promise<string | undefined>;
}

interface EniV6 {
  idle: string[];
  /** An AssignIpv6Addresses in flight: ADDs waiting on this ENI share it. */
  assigning?: Promise<void>;
}

type Pool = Pick<EniIpPool, 'allocate' | 'release' | 'leaseOf' | 'leases' | 'gc'>;

export class DualStackSource {
  private readonly enis = new Map<string, EniV6>();
  private readonly byKey = new Map<string, { eniId: string; ip6: string }>();
  private readonly cidr6 = new Map<string, string>();
  /** ENI MAC -> IPv6 gateway, and vSwitch -> IPv6 CIDR, looked up once (leaseOf is synchronous). */
  private readonly gw6 = new Map<string, string>();

  constructor(
    private readonly opts: {
      pool: Pool;
      cloud: Ipv6Cloud;
      /** The IPv6 gateway of an ENI (instance metadata `network/interfaces/macs/<mac>/ipv6-gateway`). */
      gateway6: (mac: string) => Promise<string>;
      log?: (msg: string, fields?: Record<string, unknown>) => void;
    },
  ) {}

  /** ENIs (with their IPv6s) and stored leases (with their ip6) found at start-up; looks up their gateways and CIDRs. */
  async restore(enis: EniInfo[], leases: { key: string; eniId: string; ip6?: string }[]): Promise<void> {
    for (const e of enis) {
      if (!this.gw6.has(e.mac)) this.gw6.set(e.mac, await this.opts.gateway6(e.mac));
      const c = await this.opts.cloud.ipv6CidrOf(e.vswitchId);
      if (c) this.cidr6.set(e.vswitchId, c);
    }
    // Merged: the pool may already have started a prefill on one of these ENIs.
    for (const e of enis) {
      const st = this.enis.get(e.eniId) ?? { idle: [] };
      for (const a of e.ipv6s ?? []) if (!st.idle.includes(a)) st.idle.push(a);
      this.enis.set(e.eniId, st);
    }
    for (const l of leases) {
      const st = l.ip6 ? this.enis.get(l.eniId) : undefined;
      if (!st || !st.idle.includes(l.ip6!)) continue;
      st.idle = st.idle.filter((a) => a !== l.ip6);
      this.byKey.set(l.key, { eniId: l.eniId, ip6: l.ip6! });
    }
  }

  /** Background AssignIpv6Addresses of `n` on an ENI (≤ 10 per call, as the API allows). */
  private prefill(eniId: string, n: number): void {
    let st = this.enis.get(eniId);
    if (!st) this.enis.set(eniId, (st = { idle: [] }));
    const s = st;
    const prev = s.assigning ?? Promise.resolve();
    const run = async (): Promise<void> => {
      await prev.catch(() => undefined);
      for (let left = n; left > 0; left -= 10) {
        const got = await this.opts.cloud.assignIpv6s(eniId, Math.min(10, left));
        if (this.enis.get(eniId) === s) s.idle.push(...got);
      }
    };
    const p: Promise<void> = run()
      .catch((err: unknown) => this.opts.log?.('ipv6: prefill failed', { eni: eniId, n, error: String(err) }))
      .finally(() => {
        if (s.assigning === p) s.assigning = undefined;
      });
    s.assigning = p;
  }

  /**
   * Pool events: IPv4s acquired on an ENI bring as many IPv6s; IPv4s given back take as many
   * idle IPv6s of that ENI; a deleted ENI takes all of them.
   */
  onPoolEvent(e: PoolEvent): void {
    if (e.type === 'eni-created' || e.type === 'ips-assigned') {
      this.prefill(e.eniId, e.ips);
      return;
    }
    if (e.type === 'eni-deleted') {
      this.enis.delete(e.eniId);
      for (const [k, v] of this.byKey) if (v.eniId === e.eniId) this.byKey.delete(k);
      return;
    }
    if (e.type !== 'ips-released') return;
    const st = this.enis.get(e.eniId);
    if (!st || st.idle.length === 0) return;
    const gone = st.idle.splice(0, Math.min(e.ips, st.idle.length));
    this.opts.cloud
      .unassignIpv6s(e.eniId, gone)
      .catch((err: unknown) => this.opts.log?.('ipv6: unassign failed', { eni: e.eniId, ips: gone, error: String(err) }));
  }

  private async take(key: string, lease: IpLease): Promise<string> {
    const held = this.byKey.get(key);
    if (held && held.eniId === lease.eniId) return held.ip6;
    if (held) this.put(key); // the IPv4 moved to another ENI (reservation expired): give the old one back
    let st = this.enis.get(lease.eniId);
    if (!st) this.enis.set(lease.eniId, (st = { idle: [] }));
    // Wait for a prefill in flight, then assign one ourselves if there is still none (a failed
    // prefill, or more pods than IPv4s assigned so far on this ENI).
    if (st.idle.length === 0 && st.assigning) await st.assigning;
    while (st.idle.length === 0) {
      if (!st.assigning) {
        const s = st;
        const p: Promise<void> = this.opts.cloud
          .assignIpv6s(lease.eniId, 1)
          .then((ips) => void s.idle.push(...ips))
          .finally(() => {
            if (s.assigning === p) s.assigning = undefined;
          });
        s.assigning = p;
      }
      await st.assigning;
    }
    const ip6 = st.idle.shift()!;
    this.byKey.set(key, { eniId: lease.eniId, ip6 });
    return ip6;
  }

  private put(key: string): void {
    const held = this.byKey.get(key);
    if (!held) return;
    this.byKey.delete(key);
    this.enis.get(held.eniId)?.idle.push(held.ip6);
  }

  private async withV6(lease: IpLease, ip6: string): Promise<IpLease> {
    let cidr = this.cidr6.get(lease.vswitchId);
    if (!cidr) {
      cidr = await this.opts.cloud.ipv6CidrOf(lease.vswitchId);
      if (!cidr) throw new TransientError(`terwayd: ip_stack dual: vSwitch ${lease.vswitchId} has no IPv6 CIDR`);
      this.cidr6.set(lease.vswitchId, cidr);
    }
    let gw = this.gw6.get(lease.mac);
    if (!gw) this.gw6.set(lease.mac, (gw = await this.opts.gateway6(lease.mac)));
    return { ...lease, ip6, vswitchCidr6: cidr, gateway6: gw };
  }

  async allocate(key: string): Promise<IpLease> {
    const v4 = await this.opts.pool.allocate(key);
    try {
      return await this.withV6(v4, await this.take(key, v4));
    } catch (e) {
      this.put(key);
      this.opts.pool.release(key);
      throw e instanceof TransientError
        ? e
        : new TransientError(`terwayd: IPv6 for ${key}: ${e instanceof Error ? e.message : String(e)}`, '', { cause: e });
    }
  }

  release(key: string, opts: { reserveForMs?: number } = {}): boolean {
    // A sticky key keeps its IPv6 bound along with its IPv4 (take() finds it again).
    if (!opts.reserveForMs) this.put(key);
    return this.opts.pool.release(key, opts);
  }

  /** The lease with its IPv6 (synchronous: gateway and CIDR as last looked up). */
  leaseOf(key: string): IpLease | undefined {
    const l = this.opts.pool.leaseOf(key);
    return l ? this.decorate(key, l) : undefined;
  }

  private decorate(key: string, l: IpLease): IpLease {
    const v6 = this.byKey.get(key);
    const cidr = this.cidr6.get(l.vswitchId);
    const gw = this.gw6.get(l.mac);
    return v6 && v6.eniId === l.eniId ? { ...l, ip6: v6.ip6, ...(cidr ? { vswitchCidr6: cidr } : {}), ...(gw ? { gateway6: gw } : {}) } : l;
  }

  leases(): { key: string; lease: IpLease; reservedUntil?: number }[] {
    return this.opts.pool.leases().map((x) => ({ ...x, lease: this.decorate(x.key, x.lease) }));
  }

  gc(alive: (key: string) => boolean): string[] {
    const gone = this.opts.pool.gc(alive);
    for (const k of gone) this.put(k);
    return gone;
  }
}
