/**
 * terwayd start-up, in the anchor's order: metadata -> ENI quota of the
 * instance type -> the instance's secondary ENIs from the cloud -> local
 * leases (kept only when their IP is still on one of those ENIs) -> kernel
 * repair of rules and routes for the surviving leases -> pool and gRPC server.
 * Then, every gcIntervalMs, leases whose pod's host veth is gone (the pod's
 * netns was destroyed without CNI DEL) are released, and the datapath repaired.
 */
import { hostNetns, link, type Netns } from '@cnikit/netlib';
import { AliyunEniCloud } from '../cloud/aliyun';
import { fetchInstanceMeta, METADATA_URL } from '../cloud/metadata';
import { realClock, type Clock } from '../clock';
import { hostVethName, repair, type LivePod } from '../datapath/eniip-veth';
import { EniIpPool, parsePoolConfig, type EniInfo, type PoolConfig } from '../pool';
import { ENI_RESOURCE, EniDevicePlugin } from '../deviceplugin/plugin';
import { TerwayDaemon, type PodSource } from './daemon';
import { ExclusiveEniAllocator } from './exclusive';
import { VpcRouteAllocator } from './vpc-route';
import { TerwayServer } from './server';
import { LeaseStore } from './store';

export interface TerwaydOptions {
  /** The `eni_conf` JSON of the eni-config ConfigMap (anchor keys, plus access_key/access_secret). */
  eniConf: Record<string, unknown>;
  socket: string;
  stateFile: string;
  metadataUrl?: string;
  ecsEndpoint?: string;
  vpcEndpoint?: string;
  protocol?: 'http' | 'https';
  accessKeyId?: string;
  accessKeySecret?: string;
  pods?: PodSource;
  clock?: Clock;
  hostNs?: Netns;
  /** ENIMultiIP (default: the pool of secondary IPs) or ENIOnly (a whole ENI per pod). */
  mode?: 'ENIMultiIP' | 'ENIOnly';
  /** The kubelet's device-plugin directory: when set, `aliyun/eni` is registered with the ENI quota. */
  devicePluginDir?: string;
  /** GC period (default 5 min); 0 disables. */
  gcIntervalMs?: number;
  log?: (msg: string, fields?: Record<string, unknown>) => void;
}

export interface Terwayd {
  daemon: TerwayDaemon;
  pool: EniIpPool;
  config: PoolConfig;
  gcOnce(): Promise<string[]>;
  devicePlugin: EniDevicePlugin | undefined;
  stop(): Promise<void>;
}

export async function startTerwayd(o: TerwaydOptions): Promise<Terwayd> {
  const log = o.log ?? (() => undefined);
  const config = parsePoolConfig(o.eniConf);
  const meta = await fetchInstanceMeta(o.metadataUrl ?? METADATA_URL);
  const accessKeyId = o.accessKeyId ?? (o.eniConf['access_key'] as string | undefined) ?? process.env['ALIBABA_CLOUD_ACCESS_KEY_ID'] ?? '';
  const accessKeySecret = o.accessKeySecret ?? (o.eniConf['access_secret'] as string | undefined) ?? process.env['ALIBABA_CLOUD_ACCESS_KEY_SECRET'] ?? '';
  const cloud = new AliyunEniCloud({
    regionId: meta.regionId,
    instanceId: meta.instanceId,
    accessKeyId,
    accessKeySecret,
    ...(o.ecsEndpoint ? { ecsEndpoint: o.ecsEndpoint } : {}),
    ...(o.vpcEndpoint ? { vpcEndpoint: o.vpcEndpoint } : {}),
    ...(o.protocol ? { protocol: o.protocol } : {}),
  });
  const quota = await cloud.instanceQuota(meta.instanceType);
  const clock = o.clock ?? realClock;
  const hostNs = o.hostNs ?? hostNetns();
  const pool = new EniIpPool({
    config,
    quota,
    cloud,
    clock,
    zone: meta.zoneId,
    defaultVSwitches: [meta.vswitchId],
    onEvent: (e) => log('pool', { ...e }),
  });

  // Reconcile: cloud ENIs, local leases, kernel.
  const views = (await cloud.listEnis({ instanceId: meta.instanceId, type: 'Secondary' })).filter((e) => e.status === 'InUse');
  const enis: EniInfo[] = [];
  for (const v of views) enis.push(await cloud.eniInfo(v));
  const store = new LeaseStore(o.stateFile);
  const onEni = new Map<string, EniInfo>();
  for (const e of enis) for (const a of e.ips) onEni.set(a, e);
  const stored = store.load();
  const kept = stored.filter((l) => onEni.has(l.ip));
  const exclusive = o.mode === 'ENIOnly' ? new ExclusiveEniAllocator({ cloud, config, quota, zone: meta.zoneId, defaultVSwitches: [meta.vswitchId] }) : undefined;
  if (exclusive) {
    // Whole ENIs: a stored lease keeps its ENI; an ENI nobody holds leaked (pod gone while terwayd was down).
    const leaked = exclusive.restore(enis, kept.map((l) => ({ key: l.key, eniId: l.eniId })));
    for (const id of leaked) await cloud.deleteEni(id).catch((e: unknown) => log('delete leaked ENI failed', { eni: id, error: String(e) }));
    log('restored', { mode: 'ENIOnly', enis: enis.length, leases: kept.length, leakedDeleted: leaked.length });
  } else {
    pool.restore(enis, kept.map((l) => ({ key: l.key, ip: l.ip })));
    log('restored', { enis: enis.length, leases: kept.length, dropped: stored.length - kept.length });
  }

  const livePods = (): LivePod[] =>
    exclusive
      ? []
      : pool.leases().flatMap(({ key, lease, reservedUntil }) => {
          if (reservedUntil !== undefined) return [];
          const [ns, name] = key.split('/');
          return ns && name ? [{ podNamespace: ns, podName: name, ip: lease.ip, eniMac: lease.mac, gateway: lease.gateway }] : [];
        });
  // ipvlan L2 pods have no host veth and no policy rules: neither the veth-based repair nor the
  // veth-based GC applies (their leases go with DEL; a kernel-driven GC for them is not done yet).
  const ipvlan = !exclusive && config.virtualType === 'ipvlan';
  const doRepair = async (): Promise<void> => {
    if (exclusive || ipvlan) return; // no policy routing in these modes
    const rep = await repair(hostNs, livePods()).catch((e: unknown) => (log('repair failed', { error: String(e) }), undefined));
    if (rep && (rep.rulesAdded.length || rep.rulesRemoved.length || rep.routesAdded.length || rep.routesRemoved.length)) log('repaired', { ...rep });
  };
  await doRepair();

  const daemon = new TerwayDaemon({
    pool: exclusive ?? pool,
    store,
    ...(exclusive ? { ipType: 'TypeVPCENI' as const } : {}),
    ...(o.pods ? { pods: o.pods } : {}),
    ...(config.serviceCidr ? { serviceCidr: config.serviceCidr } : {}),
    log,
  });
  const server = new TerwayServer(daemon, o.socket);
  await server.start();
  if (!exclusive) pool.start();
  let devicePlugin: EniDevicePlugin | undefined;
  if (o.devicePluginDir) {
    devicePlugin = new EniDevicePlugin({ resourceName: ENI_RESOURCE, dir: o.devicePluginDir, count: Math.max(0, quota.eniQuantity - 1) });
    await devicePlugin.start();
  }

  // ipvlan pods have no host veth: the veth-based GC would free live pods' IPs.
  const gcLeases = vethLeaseGc(daemon, hostNs, clock, log, ipvlan);
  const gcOnce = async (): Promise<string[]> => {
    const gone = await gcLeases();
    await doRepair();
    return gone;
  };
  const stopGc = startGcLoop(clock, o.gcIntervalMs, gcOnce);
  return {
    daemon,
    pool,
    config,
    gcOnce,
    devicePlugin,
    async stop() {
      stopGc();
      await devicePlugin?.stop();
      pool.stop();
      await server.stop();
    },
  };
}

export interface VpcRouteTerwaydOptions {
  socket: string;
  stateFile: string;
  /** The node's pod CIDR (its spec.podCIDR, routed to the node by the VPC route table). */
  podCidr: string;
  serviceCidr?: string;
  pods?: PodSource;
  clock?: Clock;
  hostNs?: Netns;
  gcIntervalMs?: number;
  log?: (msg: string, fields?: Record<string, unknown>) => void;
}

export interface VpcRouteTerwayd {
  daemon: TerwayDaemon;
  allocator: VpcRouteAllocator;
  gcOnce(): Promise<string[]>;
  stop(): Promise<void>;
}

/**
 * terwayd in VPC route mode (`--daemon-mode VPC`): no cloud calls; addresses
 * from the node's pod CIDR; stored leases kept when inside it; GC as in the
 * other modes (a lease whose host veth is gone for more than a minute).
 */
export async function startVpcRouteTerwayd(o: VpcRouteTerwaydOptions): Promise<VpcRouteTerwayd> {
  const log = o.log ?? (() => undefined);
  const clock = o.clock ?? realClock;
  const hostNs = o.hostNs ?? hostNetns();
  const allocator = new VpcRouteAllocator(o.podCidr);
  const store = new LeaseStore(o.stateFile);
  const stored = store.load();
  const dropped = allocator.restore(stored.map((l) => ({ key: l.key, ip: l.ip })));
  log('restored', { mode: 'VPC', podCidr: o.podCidr, leases: stored.length - dropped.length, dropped: dropped.length });
  const daemon = new TerwayDaemon({ pool: allocator, store, ipType: 'TypeVPCIP', ...(o.pods ? { pods: o.pods } : {}), ...(o.serviceCidr ? { serviceCidr: o.serviceCidr } : {}), log });
  const server = new TerwayServer(daemon, o.socket);
  await server.start();
  const gcOnce = vethLeaseGc(daemon, hostNs, clock, log, false);
  const stopGc = startGcLoop(clock, o.gcIntervalMs, gcOnce);
  return {
    daemon,
    allocator,
    gcOnce,
    async stop() {
      stopGc();
      await server.stop();
    },
  };
}

/**
 * GC of leases by the kernel: a lease whose pod's host veth is gone is a pod deleted without DEL.
 * Leases younger than a minute are left alone (an ADD may be between AllocIP and the veth).
 * With `keepAll` (modes without a host veth) nothing is released.
 */
function vethLeaseGc(
  daemon: TerwayDaemon,
  hostNs: Netns,
  clock: Clock,
  log: (msg: string, fields?: Record<string, unknown>) => void,
  keepAll: boolean,
): () => Promise<string[]> {
  const firstSeen = new Map<string, number>();
  return async () => {
    const names = new Set((await link.list(hostNs)).map((l) => l.name));
    const now = clock.now();
    const gone = daemon.gc((key) => {
      const [ns, name] = key.split('/');
      if (keepAll || !ns || !name || names.has(hostVethName(ns, name))) return true;
      const seen = firstSeen.get(key) ?? now;
      firstSeen.set(key, seen);
      return now - seen < 60_000;
    });
    for (const k of gone) firstSeen.delete(k);
    if (gone.length) log('gc', { released: gone });
    return gone;
  };
}

/** Runs `gcOnce` every `periodMs` (default 5 min; 0 = never), each run timed from the end of the last. Returns the stop function. */
function startGcLoop(clock: Clock, periodMs: number | undefined, gcOnce: () => Promise<unknown>): () => void {
  const period = periodMs ?? 5 * 60_000;
  let stop: (() => void) | undefined;
  if (period > 0) {
    const loop = (): void => {
      void gcOnce().finally(() => {
        stop = clock.setTimer(period, loop);
      });
    };
    stop = clock.setTimer(period, loop);
  }
  return () => stop?.();
}
