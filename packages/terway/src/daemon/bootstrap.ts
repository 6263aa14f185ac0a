/**
 * terwayd start-up, in Terway's order: metadata -> ENI quota of the
 * instance type -> the instance's secondary ENIs from the cloud -> local
 * leases (kept only when their IP is still on one of those ENIs) -> kernel
 * repair of rules and routes for the surviving leases -> pool and gRPC server.
 * Then, every gcIntervalMs, leases whose pod's host veth is gone (the pod's
 * netns was destroyed without CNI DEL) are released, and the datapath repaired.
 */
import { hostNetns, link, type Netns } from '@cnikit/netlib';
import { AliyunEniCloud, memberEniQuota, type EniView, type InstanceQuota } from '../cloud/aliyun';
import { fetchInstanceMeta, fetchIpv6Gateway, METADATA_URL, type InstanceMeta } from '../cloud/metadata';
import { realClock, type Clock } from '../clock';
import { hostVethName, repair, type LivePod } from '../datapath/eniip-veth';
import { repairIpvlan } from '../datapath/eniip-ipvlan';
import { ipvlanLeaseGc } from './ipvlan-gc';
import { watchEniConfigMap, type EniConfigWatch } from './eni-config-watch';
import type { HealthServer, KubeTransport } from '@cnikit/kube';
import { TerwayMetrics } from './metrics';
import { DualStackSource, EniIpPool, parsePoolConfig, type EniInfo, type EniQuota, type PoolConfig } from '../pool';
import { ENI_RESOURCE, EniDevicePlugin, MEMBER_ENI_RESOURCE } from '../deviceplugin/plugin';
import { ensureTrunkEni } from './trunk';
import { TerwayDaemon, type PodSource } from './daemon';
import { ExclusiveEniAllocator } from './exclusive';
import { VpcRouteAllocator } from './vpc-route';
import { TerwayServer } from './server';
import { LeaseStore } from './store';

type Log = (msg: string, fields?: Record<string, unknown>) => void;

export interface TerwaydOptions {
  /** The `eni_conf` JSON of the eni-config ConfigMap (Terway's keys, plus access_key/access_secret). */
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
  /** Watch the eni-config ConfigMap and apply live changes (see eni-config-watch.ts). */
  configMap?: { transport: KubeTransport; namespace: string; name: string; cniConfDir?: string; initialCniConf?: string };
  /** Serve Prometheus metrics on host:port (/metrics); the metrics are collected either way. */
  metricsAddress?: string;
  log?: Log;
}

export interface Terwayd {
  daemon: TerwayDaemon;
  pool: EniIpPool;
  config: PoolConfig;
  gcOnce(): Promise<string[]>;
  devicePlugin: EniDevicePlugin | undefined;
  /** `aliyun/member-eni`, registered when the instance has a trunk ENI (eni_conf enable_eni_trunking). */
  memberDevicePlugin: EniDevicePlugin | undefined;
  /** The trunk ENI kept attached (enable_eni_trunking on a type with EniTrunkSupported). */
  trunkEniId: string | undefined;
  /** The ConfigMap watch, when `configMap` was given. */
  configWatch: EniConfigWatch | undefined;
  metrics: TerwayMetrics;
  /** The /metrics server, when metricsAddress was given (its `url`). */
  metricsServer: HealthServer | undefined;
  stop(): Promise<void>;
}

export async function startTerwayd(o: TerwaydOptions): Promise<Terwayd> {
  const log = o.log ?? (() => undefined);
  const inst = await discoverInstance(o, log);
  const { config, meta, metrics, cloud, instQuota, clock, hostNs, trunk, quota } = inst;
  const { pool, dual } = newPool({ o, config, quota, cloud, clock, meta, metadataUrl: inst.metadataUrl, log });
  const exclusive =
    o.mode === 'ENIOnly'
      ? new ExclusiveEniAllocator({ cloud, config, quota, zone: meta.zoneId, defaultVSwitches: [meta.vswitchId] })
      : undefined;
  const store = new LeaseStore(o.stateFile);
  await restoreLeases({ cloud, store, pool, dual, exclusive, views: inst.allViews, log });

  // ipvlan L2 pods have no host veth and no policy rules: their repair is of the host slaves'
  // /32 routes and of slaves no pod uses any more; their GC looks into the pods' netns.
  const ipvlan = !exclusive && config.virtualType === 'ipvlan';
  const doRepair = datapathRepair({ exclusive: !!exclusive, ipvlan, hostNs, livePods: livePodsOf(exclusive, dual ?? pool), metrics, log });
  await doRepair();

  const { daemon, server } = await serveDaemon(o, config, store, exclusive ?? dual ?? pool, metrics, log);
  if (!exclusive) {
    pool.start();
    metrics.watchPool(pool);
  }
  const plugins = await startDevicePlugins(o.devicePluginDir, quota.eniQuantity, trunk ? memberEniQuota(instQuota) : undefined);

  const gcOnce = leaseGc({ daemon, clock, hostNs, mode: exclusive ? 'eni' : ipvlan ? 'ipvlan' : 'veth', metrics, doRepair, log });
  const stopGc = startGcLoop(clock, o.gcIntervalMs, gcOnce);
  const metricsServer = o.metricsAddress ? await metrics.serve(o.metricsAddress) : undefined;
  const configWatch = o.configMap ? await watchConfig(o, o.configMap, exclusive ?? pool, daemon, log) : undefined;
  return {
    daemon,
    pool,
    get config() {
      return exclusive ? config : pool.config;
    },
    gcOnce,
    ...plugins,
    trunkEniId: trunk?.eniId,
    configWatch,
    metrics,
    metricsServer,
    async stop() {
      stopGc();
      await configWatch?.stop();
      await metricsServer?.close();
      await plugins.devicePlugin?.stop();
      await plugins.memberDevicePlugin?.stop();
      pool.stop();
      await server.stop();
    },
  };
}

/** Everything start-up learns from the metadata service and the cloud before anything local is touched. */
async function discoverInstance(
  o: TerwaydOptions,
  log: Log,
): Promise<{
  config: PoolConfig;
  metadataUrl: string;
  meta: InstanceMeta;
  metrics: TerwayMetrics;
  cloud: AliyunEniCloud;
  instQuota: InstanceQuota;
  clock: Clock;
  hostNs: Netns;
  allViews: EniView[];
  trunk: { eniId: string } | undefined;
  quota: EniQuota;
}> {
  const config = parsePoolConfig(o.eniConf);
  const metadataUrl = o.metadataUrl ?? METADATA_URL;
  const meta = await fetchInstanceMeta(metadataUrl);
  const metrics = new TerwayMetrics();
  const cloud = newCloudClient(o, meta, metrics);
  const instQuota = await cloud.instanceQuota(meta.instanceType);
  const clock = o.clock ?? realClock;
  const hostNs = o.hostNs ?? hostNetns();
  // Every ENI of the instance (secondary ENIs for the pool, a trunk ENI, members of the trunk).
  const allViews = await cloud.listEnis({ instanceId: meta.instanceId });
  const trunk = await ensureTrunkEni({
    cloud,
    config,
    quota: instQuota,
    views: allViews,
    zone: meta.zoneId,
    defaultVSwitch: meta.vswitchId,
    log,
  });
  // The trunk ENI takes one of the instance's EniQuantity slots: the pool and exclusive ENIs get the rest.
  const quota = { eniQuantity: instQuota.eniQuantity - (trunk ? 1 : 0), ipsPerEni: instQuota.ipsPerEni };
  return { config, metadataUrl, meta, metrics, cloud, instQuota, clock, hostNs, allViews, trunk, quota };
}

/**
 * One GC pass: release the leases of pods gone without DEL (ipvlan pods have no host veth, so the
 * veth-based GC would free live pods' IPs: they are looked for in their netns), then repair the datapath.
 */
function leaseGc(a: {
  daemon: TerwayDaemon;
  clock: Clock;
  hostNs: Netns;
  mode: 'eni' | 'ipvlan' | 'veth';
  metrics: TerwayMetrics;
  doRepair: () => Promise<void>;
  log: Log;
}): () => Promise<string[]> {
  const gcLeases = a.mode === 'ipvlan' ? ipvlanLeaseGc(a.daemon, a.clock, a.log) : vethLeaseGc(a.daemon, a.hostNs, a.clock, a.log, false);
  return async () => {
    const gone = await gcLeases();
    if (gone.length) a.metrics.gcReleased.inc({ mode: a.mode }, gone.length);
    await a.doRepair();
    return gone;
  };
}

/** The ECS/VPC client: keys from the options, else eni_conf, else ALIBABA_CLOUD_ACCESS_KEY_ID / _SECRET (the variables the SDKs read); every call timed. */
function newCloudClient(o: TerwaydOptions, meta: InstanceMeta, metrics: TerwayMetrics): AliyunEniCloud {
  const accessKeyId = o.accessKeyId ?? (o.eniConf['access_key'] as string | undefined) ?? process.env['ALIBABA_CLOUD_ACCESS_KEY_ID'] ?? '';
  const accessKeySecret =
    o.accessKeySecret ?? (o.eniConf['access_secret'] as string | undefined) ?? process.env['ALIBABA_CLOUD_ACCESS_KEY_SECRET'] ?? '';
  return new AliyunEniCloud({
    onCall: (api, ms, error) => metrics.openApiLatency.observe({ api, error }, ms),
    regionId: meta.regionId,
    instanceId: meta.instanceId,
    accessKeyId,
    accessKeySecret,
    ...(o.ecsEndpoint ? { ecsEndpoint: o.ecsEndpoint } : {}),
    ...(o.vpcEndpoint ? { vpcEndpoint: o.vpcEndpoint } : {}),
    ...(o.protocol ? { protocol: o.protocol } : {}),
  });
}

/** The IPv4 pool of secondary IPs, and with ip_stack dual the IPv6 source that follows it per ENI (see pool/dual-stack.ts). */
function newPool(a: {
  o: TerwaydOptions;
  config: PoolConfig;
  quota: EniQuota;
  cloud: AliyunEniCloud;
  clock: Clock;
  meta: InstanceMeta;
  metadataUrl: string;
  log: Log;
}): { pool: EniIpPool; dual: DualStackSource | undefined } {
  const { config, cloud, log } = a;
  // Set once the pool (whose events it follows) exists.
  let dual: DualStackSource | undefined;
  const pool = new EniIpPool({
    config,
    quota: a.quota,
    cloud,
    clock: a.clock,
    zone: a.meta.zoneId,
    defaultVSwitches: [a.meta.vswitchId],
    onEvent: (e) => {
      log('pool', { ...e });
      dual?.onPoolEvent(e);
    },
  });
  dual =
    config.ipStack === 'dual' && a.o.mode !== 'ENIOnly'
      ? new DualStackSource({ pool, cloud, gateway6: (mac) => fetchIpv6Gateway(a.metadataUrl, mac), log })
      : undefined;
  return { pool, dual };
}

/**
 * Reconciles the cloud's InUse secondary ENIs with the stored leases: a lease is kept only when its IP is
 * still on one of those ENIs. In ENIOnly mode an ENI no kept lease holds leaked and is deleted.
 */
async function restoreLeases(a: {
  cloud: AliyunEniCloud;
  store: LeaseStore;
  pool: EniIpPool;
  dual: DualStackSource | undefined;
  exclusive: ExclusiveEniAllocator | undefined;
  views: EniView[];
  log: Log;
}): Promise<void> {
  const { cloud, log } = a;
  const views = a.views.filter((e) => e.type === 'Secondary' && e.status === 'InUse');
  const enis: EniInfo[] = [];
  for (const v of views) enis.push(await cloud.eniInfo(v));
  const onEni = new Map<string, EniInfo>();
  for (const e of enis) for (const ip of e.ips) onEni.set(ip, e);
  const stored = a.store.load();
  const kept = stored.filter((l) => onEni.has(l.ip));
  if (a.exclusive) {
    // Whole ENIs: a stored lease keeps its ENI; an ENI nobody holds leaked (pod gone while terwayd was down).
    const leaked = a.exclusive.restore(
      enis,
      kept.map((l) => ({ key: l.key, eniId: l.eniId })),
    );
    for (const id of leaked)
      await cloud.deleteEni(id).catch((e: unknown) => log('delete leaked ENI failed', { eni: id, error: String(e) }));
    log('restored', { mode: 'ENIOnly', enis: enis.length, leases: kept.length, leakedDeleted: leaked.length });
    return;
  }
  a.pool.restore(
    enis,
    kept.map((l) => ({ key: l.key, ip: l.ip })),
  );
  await a.dual?.restore(
    enis,
    kept.map((l) => ({ key: l.key, eniId: l.eniId, ...(l.ip6 ? { ip6: l.ip6 } : {}) })),
  );
  log('restored', { enis: enis.length, leases: kept.length, dropped: stored.length - kept.length });
}

/** The pods the datapath must serve, from the pool's leases (none in ENIOnly mode: no policy routing there). */
function livePodsOf(exclusive: ExclusiveEniAllocator | undefined, source: EniIpPool | DualStackSource): () => LivePod[] {
  return () =>
    exclusive
      ? []
      : source.leases().flatMap(({ key, lease, reservedUntil }) => {
          if (reservedUntil !== undefined) return [];
          const [ns, name] = key.split('/');
          const v6 = lease.ip6 && lease.gateway6 ? { ip6: lease.ip6, gateway6: lease.gateway6 } : {};
          return ns && name ? [{ podNamespace: ns, podName: name, ip: lease.ip, eniMac: lease.mac, gateway: lease.gateway, ...v6 }] : [];
        });
}

/** Repairs the kernel's rules and routes for the live pods (at start-up and after each GC); a failure is logged, not thrown. */
function datapathRepair(a: {
  exclusive: boolean;
  ipvlan: boolean;
  hostNs: Netns;
  livePods: () => LivePod[];
  metrics: TerwayMetrics;
  log: Log;
}): () => Promise<void> {
  const { hostNs, livePods, log } = a;
  const countRepairs = (rep: Record<string, unknown[]>): void => {
    for (const [kind, list] of Object.entries(rep)) if (list.length) a.metrics.repairs.inc({ kind }, list.length);
  };
  return async () => {
    if (a.exclusive) return; // no policy routing in this mode
    if (a.ipvlan) {
      const rep = await repairIpvlan(
        hostNs,
        livePods().map((p) => ({ ip: p.ip, eniMac: p.eniMac })),
      ).catch((e: unknown) => (log('repair failed', { error: String(e) }), undefined));
      if (rep && (rep.routesAdded.length || rep.routesRemoved.length || rep.slavesRemoved.length))
        log('repaired', { mode: 'ipvlan', ...rep });
      if (rep) countRepairs({ routesAdded: rep.routesAdded, routesRemoved: rep.routesRemoved, slavesRemoved: rep.slavesRemoved });
      return;
    }
    const rep = await repair(hostNs, livePods()).catch((e: unknown) => (log('repair failed', { error: String(e) }), undefined));
    if (rep && (rep.rulesAdded.length || rep.rulesRemoved.length || rep.routesAdded.length || rep.routesRemoved.length))
      log('repaired', { ...rep });
    if (rep)
      countRepairs({
        rulesAdded: rep.rulesAdded,
        rulesRemoved: rep.rulesRemoved,
        routesAdded: rep.routesAdded,
        routesRemoved: rep.routesRemoved,
      });
  };
}

/** The daemon over the mode's address source (ENIOnly: whole ENIs, typed TypeVPCENI), served on the gRPC socket. */
async function serveDaemon(
  o: TerwaydOptions,
  config: PoolConfig,
  store: LeaseStore,
  source: ExclusiveEniAllocator | DualStackSource | EniIpPool,
  metrics: TerwayMetrics,
  log: Log,
): Promise<{ daemon: TerwayDaemon; server: TerwayServer }> {
  const daemon = new TerwayDaemon({
    pool: source,
    store,
    ...(source instanceof ExclusiveEniAllocator ? { ipType: 'TypeVPCENI' as const } : {}),
    ...(o.pods ? { pods: o.pods } : {}),
    ...(config.serviceCidr ? { serviceCidr: config.serviceCidr } : {}),
    log,
  });
  const server = new TerwayServer(daemon, o.socket, (method, ms, error) => metrics.rpcLatency.observe({ method, error }, ms));
  await server.start();
  return { daemon, server };
}

/**
 * `aliyun/eni` with the ENI quota (the primary ENI excluded) when the kubelet's device-plugin directory is given,
 * and `aliyun/member-eni` beside it when there is a trunk (`memberQuota`).
 */
async function startDevicePlugins(
  dir: string | undefined,
  eniQuantity: number,
  memberQuota: number | undefined,
): Promise<{ devicePlugin: EniDevicePlugin | undefined; memberDevicePlugin: EniDevicePlugin | undefined }> {
  if (!dir) return { devicePlugin: undefined, memberDevicePlugin: undefined };
  const devicePlugin = new EniDevicePlugin({ resourceName: ENI_RESOURCE, dir, count: Math.max(0, eniQuantity - 1) });
  await devicePlugin.start();
  if (memberQuota === undefined) return { devicePlugin, memberDevicePlugin: undefined };
  // Member ENIs ride on the trunk: their quota is EniTotalQuantity - EniQuantity, apart from aliyun/eni's.
  const memberDevicePlugin = new EniDevicePlugin({ resourceName: MEMBER_ENI_RESOURCE, dir, count: memberQuota });
  await memberDevicePlugin.start();
  return { devicePlugin, memberDevicePlugin };
}

/** Live eni-config changes go to whichever allocator serves the mode, and the service CIDR to the daemon. */
function watchConfig(
  o: TerwaydOptions,
  configMap: NonNullable<TerwaydOptions['configMap']>,
  allocator: { updateConfig(next: PoolConfig): void },
  daemon: TerwayDaemon,
  log: Log,
): Promise<EniConfigWatch> {
  return watchEniConfigMap({
    ...configMap,
    initial: o.eniConf,
    apply: (next) => {
      allocator.updateConfig(next);
      daemon.setServiceCidr(next.serviceCidr);
    },
    log,
  });
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
  log?: Log;
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
  const daemon = new TerwayDaemon({
    pool: allocator,
    store,
    ipType: 'TypeVPCIP',
    ...(o.pods ? { pods: o.pods } : {}),
    ...(o.serviceCidr ? { serviceCidr: o.serviceCidr } : {}),
    log,
  });
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
function vethLeaseGc(daemon: TerwayDaemon, hostNs: Netns, clock: Clock, log: Log, keepAll: boolean): () => Promise<string[]> {
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
