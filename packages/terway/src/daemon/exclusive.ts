/**
 * Exclusive ENI mode (Terway's "ENIOnly"): every pod gets a whole ENI, created
 * and attached at AllocIP and detached and deleted at ReleaseIP. Same surface
 * as the pool's (allocate / release / leaseOf / leases / gc) so the daemon
 * serves either. Creations run concurrently per pod; the instance quota
 * (EniQuantity - 1) bounds them, beyond it allocate fails with code 11.
 */
import { TransientError } from '@cnikit/netlib';
import { KeyedLeases } from './keyed-leases';
import { PoolExhaustedError, pickVSwitch, type EniCloud, type EniInfo, type EniQuota, type IpLease, type PoolConfig } from '../pool';

export class ExclusiveEniAllocator extends KeyedLeases<EniInfo> {
  private readonly pending = new Map<string, Promise<IpLease>>();

  constructor(private readonly opts: { cloud: EniCloud; config: PoolConfig; quota: EniQuota; zone: string; defaultVSwitches?: string[] }) {
    super();
  }

  /** Live eni_conf change (vSwitches, security groups, max_eni apply to the next ENI). */
  updateConfig(config: PoolConfig): void {
    this.opts.config = config;
  }

  get capacity(): number {
    const q = Math.max(0, this.opts.quota.eniQuantity - 1);
    return this.opts.config.maxEni > 0 ? Math.min(q, this.opts.config.maxEni) : q;
  }

  protected lease(e: EniInfo): IpLease {
    return { ip: e.primaryIp, eniId: e.eniId, mac: e.mac, vswitchId: e.vswitchId, vswitchCidr: e.vswitchCidr, gateway: e.gateway };
  }

  restore(enis: EniInfo[], leases: { key: string; eniId: string }[]): string[] {
    const byId = new Map(enis.map((e) => [e.eniId, e]));
    for (const l of leases) {
      const e = byId.get(l.eniId);
      if (e) this.byKey.set(l.key, e);
    }
    const owned = new Set([...this.byKey.values()].map((e) => e.eniId));
    return enis.filter((e) => !owned.has(e.eniId)).map((e) => e.eniId);
  }

  allocate(key: string): Promise<IpLease> {
    const held = this.byKey.get(key);
    if (held) return Promise.resolve(this.lease(held));
    const p = this.pending.get(key);
    if (p) return p;
    if (this.byKey.size + this.pending.size >= this.capacity)
      return Promise.reject(new PoolExhaustedError(`no ENI left: ${this.capacity} exclusive ENIs are all in use`));
    const run = (async (): Promise<IpLease> => {
      const ids = this.opts.config.vswitches[this.opts.zone] ?? this.opts.defaultVSwitches ?? [];
      const vsw = pickVSwitch(await this.opts.cloud.describeVSwitches(ids), this.opts.config.vswitchPolicy, 1);
      if (!vsw) throw new PoolExhaustedError(`no vSwitch in zone ${this.opts.zone} with a free IP`);
      try {
        const e = await this.opts.cloud.createEni({ vswitchId: vsw.id, securityGroups: this.opts.config.securityGroups, ipCount: 1 });
        this.byKey.set(key, e);
        return this.lease(e);
      } catch (err) {
        throw new TransientError(`exclusive ENI for ${key}: ${err instanceof Error ? err.message : String(err)}`, '', { cause: err });
      }
    })().finally(() => this.pending.delete(key));
    this.pending.set(key, run);
    return run;
  }

  /** Detaches and deletes the pod's ENI (in the background); false for an unknown key. */
  release(key: string): boolean {
    const e = this.byKey.get(key);
    if (!e) return false;
    this.byKey.delete(key);
    this.opts.cloud.deleteEni(e.eniId).catch(() => {
      // A failed delete leaves an unowned ENI: the next start-up deletes it.
    });
    return true;
  }
}
