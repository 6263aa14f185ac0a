/**
 * terwayd's logic, transport-free: AllocIP / ReleaseIP / GetIPInfo /
 * RecordEvent over the ENI multi-IP pool, with the lease state persisted
 * after every change. Pod metadata (annotations, StatefulSet ownership) comes
 * from a PodSource (Kubernetes in production, a map in tests).
 */
import { TransientError } from '@cnikit/netlib';
import { bandwidthFrom } from '../datapath/bandwidth';
import type { EniIpPool, IpLease } from '../pool';
import { POOL_UNAVAILABLE } from '../rpc/proto';
import type { AllocIPReply, EventReply, EventRequest, GetInfoReply, ListLeasesReply, NetConf, PodRef, ReleaseIPReply } from '../rpc/proto';
import type { LeaseStore, StoredLease } from './store';

export const RESERVATION_ANNOTATION = 'k8s.aliyun.com/pod-ip-reservation';
/** Sticky IPs stay bound this long after the pod goes (Terway: 5 min). */
export const RESERVE_MS = 5 * 60_000;

export interface PodMeta {
  annotations: Record<string, string>;
  /** Owned by a StatefulSet: keeps its IP across re-creation. */
  statefulSet?: boolean;
}

export interface PodSource {
  get(namespace: string, name: string): Promise<PodMeta | undefined>;
}

/** What the daemon hands out addresses from: the multi-IP pool or whole ENIs. */
export type AddressSource = Pick<EniIpPool, 'allocate' | 'leaseOf' | 'leases' | 'gc'> & {
  release(key: string, opts?: { reserveForMs?: number }): boolean;
  /** Why no address can be had now (EniIpPool.unavailable); absent where it cannot tell. */
  unavailable?(): string | undefined;
};

export interface DaemonOptions {
  pool: AddressSource;
  /** TypeENIMultiIP (default), TypeVPCENI (exclusive ENI) or TypeVPCIP (VPC route). */
  ipType?: 'TypeENIMultiIP' | 'TypeVPCENI' | 'TypeVPCIP';
  store: LeaseStore;
  pods?: PodSource;
  serviceCidr?: string;
  log?: (msg: string, fields?: Record<string, unknown>) => void;
}

export class TerwayDaemon {
  readonly events: EventRequest[] = [];
  private readonly containers = new Map<string, string>();
  private readonly netnsPaths = new Map<string, string>();

  constructor(private readonly opts: DaemonOptions) {
    for (const l of opts.store.load()) {
      this.containers.set(l.key, l.containerId);
      if (l.netns) this.netnsPaths.set(l.key, l.netns);
    }
  }

  /** A live eni_conf change of service_cidr: answered to the pods added from now on. */
  setServiceCidr(cidr: string | undefined): void {
    if (cidr) this.opts.serviceCidr = cidr;
    else delete this.opts.serviceCidr;
  }

  /** The leases held (and reserved) now. */
  leases(): { key: string; lease: IpLease; reservedUntil?: number }[] {
    return this.opts.pool.leases();
  }

  /** The netns path the pod's AllocIP named (undefined for leases stored before it was recorded). */
  netnsOf(key: string): string | undefined {
    return this.netnsPaths.get(key);
  }

  private get ipType(): string {
    return this.opts.ipType ?? 'TypeENIMultiIP';
  }

  private key(r: PodRef): string {
    if (!r.K8sPodNamespace || !r.K8sPodName)
      throw new TypeError(`terwayd: K8sPodNamespace and K8sPodName are required (got "${r.K8sPodNamespace}"/"${r.K8sPodName}")`);
    return `${r.K8sPodNamespace}/${r.K8sPodName}`;
  }

  private persist(): void {
    const out: StoredLease[] = this.opts.pool.leases().map(({ key, lease, reservedUntil }) => ({
      key,
      ip: lease.ip,
      eniId: lease.eniId,
      ...(lease.ip6 ? { ip6: lease.ip6 } : {}),
      containerId: this.containers.get(key) ?? '',
      ...(this.netnsPaths.has(key) ? { netns: this.netnsPaths.get(key)! } : {}),
      ...(reservedUntil !== undefined ? { reservedUntil } : {}),
    }));
    this.opts.store.save(out);
  }

  private netConf(lease: IpLease, meta: PodMeta | undefined, ifName: string): NetConf {
    const bw = bandwidthFrom(meta?.annotations);
    return {
      BasicInfo: {
        PodIP: { IPv4: lease.ip, IPv6: lease.ip6 ?? '' },
        PodCIDR: { IPv4: lease.vswitchCidr, IPv6: lease.vswitchCidr6 ?? '' },
        GatewayIP: { IPv4: lease.gateway, IPv6: lease.gateway6 ?? '' },
        ServiceCIDR: this.opts.serviceCidr ? { IPv4: this.opts.serviceCidr, IPv6: '' } : null,
      },
      ENIInfo: { MAC: lease.mac, Trunk: false, Vid: 0, GatewayIP: { IPv4: lease.gateway, IPv6: lease.gateway6 ?? '' } },
      Pod: { Ingress: bw.ingressBps ?? 0, Egress: bw.egressBps ?? 0, NetworkPriority: '' },
      IfName: ifName || 'eth0',
      ExtraRoutes: [],
      DefaultRoute: true,
    };
  }

  async allocIP(r: PodRef): Promise<AllocIPReply> {
    const key = this.key(r);
    let meta: PodMeta | undefined;
    try {
      meta = await this.opts.pods?.get(r.K8sPodNamespace, r.K8sPodName);
    } catch (e) {
      // Without the pod's annotations its bandwidth limit would be silently lost: retry later.
      throw new TransientError(`terwayd: read pod ${key}: ${e instanceof Error ? e.message : String(e)}`, '', { cause: e });
    }
    const lease = await this.opts.pool.allocate(key);
    this.containers.set(key, r.K8sPodInfraContainerId);
    if (r.Netns) this.netnsPaths.set(key, r.Netns);
    else this.netnsPaths.delete(key);
    this.persist();
    this.opts.log?.('alloc', { pod: key, ip: lease.ip, eni: lease.eniId, containerId: r.K8sPodInfraContainerId });
    return { Success: true, IPType: this.ipType, IPv4: true, IPv6: Boolean(lease.ip6), NetConfs: [this.netConf(lease, meta, r.IfName)] };
  }

  async releaseIP(r: PodRef & { Reason?: string }): Promise<ReleaseIPReply> {
    const key = this.key(r);
    const owner = this.containers.get(key);
    // A stale DEL (an older sandbox of a re-created pod) must not free the new one's IP.
    if (owner && r.K8sPodInfraContainerId && owner !== r.K8sPodInfraContainerId) return { Success: true, IPv4: true, IPv6: false };
    const meta = await this.opts.pods?.get(r.K8sPodNamespace, r.K8sPodName).catch(() => undefined);
    const sticky = meta?.statefulSet === true || meta?.annotations[RESERVATION_ANNOTATION] === 'true';
    this.opts.pool.release(key, sticky && this.ipType === 'TypeENIMultiIP' ? { reserveForMs: RESERVE_MS } : {});
    this.containers.delete(key);
    this.netnsPaths.delete(key);
    this.persist();
    this.opts.log?.('release', { pod: key, sticky, containerId: r.K8sPodInfraContainerId });
    return { Success: true, IPv4: true, IPv6: false };
  }

  async getIPInfo(r: PodRef): Promise<GetInfoReply> {
    const key = this.key(r);
    const lease = this.opts.pool.leaseOf(key);
    if (!lease) {
      const why = this.opts.pool.unavailable?.();
      const error = why ? `${POOL_UNAVAILABLE}${why}` : `no IP for ${key}`;
      return { IPType: this.ipType, Success: false, IPv4: false, IPv6: false, NetConfs: [], Error: error, ContainerId: '' };
    }
    const meta = await this.opts.pods?.get(r.K8sPodNamespace, r.K8sPodName).catch(() => undefined);
    // The holder's container ID goes back: the caller may be an older sandbox of the pod (a stale DEL or CHECK).
    return {
      IPType: this.ipType,
      Success: true,
      IPv4: true,
      IPv6: Boolean(lease.ip6),
      NetConfs: [this.netConf(lease, meta, r.IfName)],
      Error: '',
      ContainerId: this.containers.get(key) ?? '',
    };
  }

  async recordEvent(e: EventRequest): Promise<EventReply> {
    this.events.push(e);
    if (this.events.length > 1000) this.events.shift();
    this.opts.log?.('event', { ...e });
    return { Succeed: true, Error: '' };
  }

  /** The leases pods hold, with their sandboxes; an IP reserved for a pod's return is no pod's (ListLeases). */
  async listLeases(): Promise<ListLeasesReply> {
    const leases = this.opts.pool.leases().filter((l) => l.reservedUntil === undefined);
    return {
      Leases: leases.map(({ key, lease }) => {
        const [ns = '', name = ''] = key.split('/');
        return {
          K8sPodNamespace: ns,
          K8sPodName: name,
          ContainerId: this.containers.get(key) ?? '',
          Netns: this.netnsPaths.get(key) ?? '',
          IPv4: lease.ip,
          IPv6: lease.ip6 ?? '',
        };
      }),
    };
  }

  /** GC of pods deleted without CNI DEL: releases leases of keys `alive` rejects. */
  gc(alive: (key: string) => boolean): string[] {
    const gone = this.opts.pool.gc(alive);
    for (const k of gone) {
      this.containers.delete(k);
      this.netnsPaths.delete(k);
    }
    if (gone.length) this.persist();
    return gone;
  }
}

/** Errors that mean "try again later" on the CNI side (code 11). */
export function isTransient(e: unknown): boolean {
  return e instanceof TransientError;
}
