/**
 * terwayd start-up, in the anchor's order: metadata -> ENI quota of the
 * instance type -> the instance's secondary ENIs from the cloud -> local
 * leases (kept only when their IP is still on one of those ENIs) -> kernel
 * repair of rules and routes for the surviving leases -> pool and gRPC server.
 * Then, every gcIntervalMs, leases whose pod's host veth is gone (the pod's
 * netns was destroyed without CNI DEL) are released, and the datapath repaired.
 */
import { hostNetns, link, type Netns } from '@cnikit/netlib';
import { AliyunEniCloud, memberEniQuota } from '../cloud/aliyun';
import { fetchInstanceMeta, fetchIpv6Gateway, METADATA_URL } from '../cloud/metadata';
import { realClock, type Clock } from '../clock';
import { hostVethName, repair, type LivePod } from '../datapath/eniip-veth';
import { repairIpvlan } from '../datapath/eniip-ipvlan';
import { ipvlanLeaseGc } from './ipvlan-gc';
import { watchEniConfigMap, type EniConfigWatch } from './eni-config-watch';
import type { HealthServer, KubeTransport } from '@cnikit/kube';
import { TerwayMetrics } from './metrics';
import { DualStackSource, EniIpPool, parsePoolConfig, type EniInfo, type PoolConfig } from '../pool';
import { ENI_RESOURCE, EniDevicePlugin, MEMBER_ENI_RESOURCE } from '../deviceplugin/plugin';
import { ensureTrunkEni } from './trunk';
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
  /** Watch the eni-config ConfigMap and apply live changes (see eni-config-watch.ts). */
  configMap?: { transport: KubeTransport; namespace: string; name: string; cniConfDir?: string; initialCniConf?: string };
  /** Serve Prometheus metrics on host:port (/metrics); the metrics are collected either way. */
  metricsAddress?: string;
  log?: (msg: string, fields?: Record<string, unknown>) => void;
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
  const config = parsePoolConfig(o.eniConf);
  const metadataUrl = o.metadataUrl ?? METADATA_URL;
  const meta = await fetchInstanceMeta(metadataUrl);
  // Set once the pool (whose events it follows) exists.
  let dual: DualStackSource | undefined;
  const accessKeyId = o.accessKeyId ?? (o.eniConf['access_key'] as string | undefined) ?? process.env['ALIBABA_CLOUD_ACCESS_KEY_ID'] ?? '';
  const accessKeySecret =
    o.accessKeySecret ?? (o.eniConf['access_secret'] as string | undefined) ?? process.env['ALIBABA_CLOUD_ACCESS_KEY_SECRET'] ?? '';
  const metrics = new TerwayMetrics();
  const cloud = new AliyunEniCloud({
    onCall: (api, ms, error) => metrics.openApiLatency.observe({ api, error }, ms),
    regionId: meta.regionId,
    instanceId: meta.instanceId,
    accessKeyId,
    accessKeySecret,
    ...(o.ecsEndpoint ? { ecsEndpoint: o.ecsEndpoint } : {}),
    ...(o.vpcEndpoint ? { vpcEndpoint: o.vpcEndpoint } : {}),
    ...(o.protocol ? { protocol: o.protocol } : {}),
  });
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
  const pool = new EniIpPool({
    config,
    quota,
    cloud,
    clock,
    zone: meta.zoneId,
    defaultVSwitches: [meta.vswitchId],
    onEvent: (e) => {
      log('pool', { ...e });
      dual?.onPoolEvent(e);
    },
  });
  // ip_stack dual: IPv6 follows the IPv4 pool per ENI (see pool/dual-stack.ts).
  dual =
    config.ipStack === 'dual' && o.mode !== 'ENIOnly'
      ? new DualStackSource({ pool, cloud, gateway6: (mac) => fetchIpv6Gateway(metadataUrl, mac), log })
      : undefined;

  // Reconcile: cloud ENIs, local leases, kernel.
  const views = allViews.filter((e) => e.type === 'Secondary' && e.status === 'InUse');
  const enis: EniInfo[] = [];
  for (const v of views) enis.push(await cloud.eniInfo(v));
  const store = new LeaseStore(o.stateFile);
  const onEni = new Map<string, EniInfo>();
  for (const e of enis) for (const a of e.ips) onEni.set(a, e);
  const stored = store.load();
  const kept = stored.filter((l) => onEni.has(l.ip));
  const exclusive =
    o.mode === 'ENIOnly'
      ? new ExclusiveEniAllocator({ cloud, config, quota, zone: meta.zoneId, defaultVSwitches: [meta.vswitchId] })
      : undefined;
  if (exclusive) {
    // Whole ENIs: a stored lease keeps its ENI; an ENI nobody holds leaked (pod gone while terwayd was down).
    const leaked = exclusive.restore(
      enis,
      kept.map((l) => ({ key: l.key, eniId: l.eniId })),
    );
    for (const id of leaked)
      await cloud.deleteEni(id).catch((e: unknown) => log('delete leaked ENI failed', { eni: id, error: String(e) }));
    log('restored', { mode: 'ENIOnly', enis: enis.length, leases: kept.length, leakedDeleted: leaked.length });
  } else {
    pool.restore(
      enis,
      kept.map((l) => ({ key: l.key, ip: l.ip })),
    );
    await dual?.restore(
      enis,
      kept.map((l) => ({ key: l.key, eniId: l.eniId, ...(l.ip6 ? { ip6: l.ip6 } : {}) })),
    );
    log('restored', { enis: enis.length, leases: kept.length, dropped: stored.length - kept.length });
  }

  const livePods = (): LivePod[] =>
    exclusive
      ? []
      : (dual ?? pool).leases().flatMap(({ key, lease, reservedUntil }) => {
          if (reservedUntil !== undefined) return [];
          const [ns, name] = key.split('/');
          const v6 = lease.ip6 && lease.gateway6 ? { ip6: lease.ip6, gateway6: lease.gateway6 } : {};
          return ns && name ? [{ podNamespace: ns, podName: name, ip: lease.ip, eniMac: lease.mac, gateway: lease.gateway, ...v6 }] : [];
        });
  // ipvlan L2 pods have no host veth and no policy rules: their repair is of the host slaves'
  // /32 routes and of slaves no pod uses any more; their GC looks into the pods' netns.
  const ipvlan = !exclusive && config.virtualType === 'ipvlan';
  const countRepairs = (rep: Record<string, unknown[]>): void => {
    for (const [kind, list] of Object.entries(rep)) if (list.length) metrics.repairs.inc({ kind }, list.length);
  };
  const doRepair = async (): Promise<void> => {
    if (exclusive) return; // no policy routing in this mode
    if (ipvlan) {
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
  await doRepair();

  const daemon = new TerwayDaemon({
    pool: exclusive ?? dual ?? pool,
    store,
    ...(exclusive ? { ipType: 'TypeVPCENI' as const } : {}),
    ...(o.pods ? { pods: o.pods } : {}),
    ...(config.serviceCidr ? { serviceCidr: config.serviceCidr } : {}),
    log,
  });
  const server = new TerwayServer(daemon, o.socket, (method, ms, error) => metrics.rpcLatency.observe({ method, error }, ms));
  await server.start();
  if (!exclusive) {
    pool.start();
    metrics.watchPool(pool);
  }
  let devicePlugin: EniDevicePlugin | undefined;
  let memberDevicePlugin: EniDevicePlugin | undefined;
  if (o.devicePluginDir) {
    devicePlugin = new EniDevicePlugin({ resourceName: ENI_RESOURCE, dir: o.devicePluginDir, count: Math.max(0, quota.eniQuantity - 1) });
    await devicePlugin.start();
    if (trunk) {
      // Member ENIs ride on the trunk: their quota is EniTotalQuantity - EniQuantity, apart from aliyun/eni's.
      memberDevicePlugin = new EniDevicePlugin({
        resourceName: MEMBER_ENI_RESOURCE,
        dir: o.devicePluginDir,
        count: memberEniQuota(instQuota),
      });
      await memberDevicePlugin.start();
    }
  }

  // ipvlan pods have no host veth: the veth-based GC would free live pods' IPs.
  const gcLeases = ipvlan ? ipvlanLeaseGc(daemon, clock, log) : vethLeaseGc(daemon, hostNs, clock, log, false);
  const gcOnce = async (): Promise<string[]> => {
    const gone = await gcLeases();
    if (gone.length) metrics.gcReleased.inc({ mode: exclusive ? 'eni' : ipvlan ? 'ipvlan' : 'veth' }, gone.length);
    await doRepair();
    return gone;
  };
  const stopGc = startGcLoop(clock, o.gcIntervalMs, gcOnce);
  const metricsServer = o.metricsAddress ? await metrics.serve(o.metricsAddress) : undefined;
  let configWatch: EniConfigWatch | undefined;
  if (o.configMap) {
    configWatch = await watchEniConfigMap({
      ...o.configMap,
      initial: o.eniConf,
      apply: (next) => {
        if (exclusive) exclusive.updateConfig(next);
        else pool.updateConfig(next);
        daemon.setServiceCidr(next.serviceCidr);
      },
      log,
    });
  }
  return {
    daemon,
    pool,
    get config() {
      return exclusive ? config : pool.config;
    },
    gcOnce,
    devicePlugin,
    memberDevicePlugin,
    trunkEniId: trunk?.eniId,
    configWatch,
    metrics,
    metricsServer,
    async stop() {
      stopGc();
      await configWatch?.stop();
      await metricsServer?.close();
      await devicePlugin?.stop();
      await memberDevicePlugin?.stop();
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
