/**
 * What `doctor node` reads, each from where its owner keeps it, read-only:
 *   - the sandboxes the CRI knows (ListPodSandbox on the runtime's socket, as crictl asks it);
 *   - the attachments libcni cached (`<cacheDir>/results/<network>-<containerID>-<ifname>`: the runtime's in
 *     /var/lib/cni, Multus's for each delegate in /var/lib/cni/multus);
 *   - host-local leases (`<dataDir>/<network>/<ip>`: the container ID, then the ifname);
 *   - host veths the veth plugin left (alias `cnikit-veth:<network>:<containerID>`);
 *   - Coil's pods: host veths with alias `COIL:<pool>:<containerID>:<ifname>`, and their /32 and /128 routes in
 *     Coil's pod table (116 unless coild's --pod-table-id says otherwise), as coild itself recovers them;
 *   - router's host routes (protocol 158, in any table), each carrying its attachment's key as its metric;
 *   - terwayd's leases (its --state file, /var/lib/cni/terway/pod.json): address, ENI and container ID each;
 *   - gcp-ipam's records (its stateDir), and with --cloud the aliases GCE holds on the node's VM;
 *   - cilium-eni-agent's book, asked on its socket (op `leases`): address, ENI and `<containerID>/<ifname>` each.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { hostNetns, link, route, type Netns } from '@cnikit/netlib';
import { RTPROT_ROUTER } from '@cnikit/router/marks';
import { GrpcError, GrpcStatus, protoFields, unaryCall } from '@cnikit/unary-grpc';
import { nodeAliases } from '@cnikit/gcp-ipam/cloud';
import { agentRequest, DEFAULT_SOCKET, type AgentReply } from '@cnikit/cilium-eni-ipam/agent-client';
import type { EniAddresses } from '@cnikit/cilium-eni-ipam/cloud';
import type { NodeEnis } from '@cnikit/terway/cloud';
import type { NodeSources } from './join';

export interface Sandbox {
  id: string;
  namespace: string;
  name: string;
  uid: string;
  /** SANDBOX_READY: its network is set up; NOTREADY: stopped (its network torn down, or being). */
  ready: boolean;
  /** Not in the CRI's list yet, only in containerd's sandbox store: being created, its network being set up. */
  creating?: boolean;
}

export interface CachedAttachment {
  file: string;
  network: string;
  containerId: string;
  ifName: string;
  /** Plugin types of the cached network config, in chain order, and the IPAM types they delegate to. */
  plugins: string[];
  ipam: string[];
  ips: string[];
  /** The entry as libcni wrote it: what a DEL of the attachment needs (config, result, netns, arguments). */
  entry: CacheFile;
}

export interface Lease {
  network: string;
  ip: string;
  containerId: string;
  ifName?: string;
}

export interface HostVeth {
  name: string;
  network: string;
  containerId: string;
}

export interface CoilVeth {
  name: string;
  pool: string;
  containerId: string;
  ifName: string;
  /** Addresses routed to the veth in Coil's pod table. */
  ips: string[];
}

/** A host route router made: `<ip>/32 dev <overlay peer> proto 158 metric <attachment key>`. */
export interface RouterRoute {
  ip: string;
  table: number;
  /** The overlay peer the route goes through (the pod's eth0 seen from the host). */
  link: string;
  /** attachmentKey(network, containerID, ifname) of @cnikit/router: the route's only tie to its attachment. */
  key: number;
}

/** A lease terwayd holds for a pod (its lease store: packages/terway/src/daemon/store.ts). */
export interface TerwayLease {
  ip: string;
  ip6?: string;
  eniId: string;
  containerId: string;
}

/** gcp-ipam's node-local record of an attachment (`<stateDir>/containers/<containerID>_<ifname>`). */
export interface GcpRecord {
  network: string;
  ip: string;
  containerId: string;
  ifName: string;
  /** The IPAllocation the address is claimed by. */
  allocation: string;
}

/** An IP cilium-eni-agent handed out (packages/cilium-eni-ipam/src/pool.ts), to its owner `<containerID>/<ifname>`. */
export interface CiliumLease {
  ip: string;
  containerId: string;
  ifName: string;
  eniId: string;
}

/** The aliases GCE holds on the node's VM (doctor node --cloud), or why they could not be read. */
export interface GcpCloud {
  instance: string;
  aliases: string[];
  error?: string;
}

/** The addresses EC2 assigns to the ENIs of cilium-eni-agent's book (doctor node --cloud), or why they could not be read. */
export type CiliumCloud = EniAddresses;

/** The addresses ECS assigns to the ENIs of terwayd's leases (doctor node --cloud), or why they could not be read. */
export type TerwayCloud = NodeEnis;

/** gcp-ipam's default ipam.stateDir. */
export const GCP_IPAM_STATE = '/var/lib/cni/gcp-ipam';

/** cilium-eni-agent's default --socket. */
export const CILIUM_SOCKET = DEFAULT_SOCKET;

/** terwayd's default --state. */
export const TERWAY_STATE = '/var/lib/cni/terway/pod.json';

/** Coil's pod routing table (coild --pod-table-id). */
export const COIL_POD_TABLE = 116;

const text = (v: number | Buffer): string => (Buffer.isBuffer(v) ? v.toString('utf8') : '');

/** runtime.v1 PodSandbox: id = 1, metadata = 2 { name = 1, uid = 2, namespace = 3 }, state = 3 (0 READY). */
function decodeSandbox(buf: Buffer): Sandbox {
  const s: Sandbox = { id: '', namespace: '', name: '', uid: '', ready: true };
  for (const f of protoFields(buf)) {
    if (f.field === 1) s.id = text(f.value);
    else if (f.field === 3) s.ready = f.value === 0;
    else if (f.field === 2 && Buffer.isBuffer(f.value)) {
      for (const m of protoFields(f.value)) {
        if (m.field === 1) s.name = text(m.value);
        else if (m.field === 2) s.uid = text(m.value);
        else if (m.field === 3) s.namespace = text(m.value);
      }
    }
  }
  return s;
}

/** Every sandbox the CRI lists (ListPodSandbox without a filter: ListPodSandboxResponse.items = 1). */
export async function criSandboxes(socket: string, timeoutMs = 10_000): Promise<Sandbox[]> {
  const res = await unaryCall(socket, '/runtime.v1.RuntimeService/ListPodSandbox', Buffer.alloc(0), timeoutMs);
  const out: Sandbox[] = [];
  for (const f of protoFields(res)) if (f.field === 1 && Buffer.isBuffer(f.value)) out.push(decodeSandbox(f.value));
  return out;
}

/**
 * The sandboxes in containerd's own store (containerd.services.sandbox.v1.Store/List in the k8s.io namespace;
 * StoreListResponse.list = 1; containerd.types.Sandbox: sandbox_id = 1, labels = 4 as {key = 1, value = 2}).
 * containerd's CRI puts a sandbox in the list ListPodSandbox answers from only once it runs, after its network is
 * set up (internal/cri/server/sandbox_run.go: sandboxStore.Add comes last); its store record is written before
 * the first CNI call, labelled with the CRI's sandbox name `<pod>_<namespace>_<uid>_<attempt>`. Without it a pod
 * being created looks gone while its ADD runs. `undefined`: the runtime has no such service (not containerd).
 */
export async function containerdSandboxes(socket: string, timeoutMs = 10_000): Promise<Sandbox[] | undefined> {
  let res: Buffer;
  try {
    res = await unaryCall(socket, '/containerd.services.sandbox.v1.Store/List', Buffer.alloc(0), timeoutMs, [
      ['containerd-namespace', 'k8s.io'],
    ]);
  } catch (err) {
    if (err instanceof GrpcError && !err.local && err.code === GrpcStatus.UNIMPLEMENTED) return undefined;
    throw err;
  }
  const out: Sandbox[] = [];
  for (const f of protoFields(res)) if (f.field === 1 && Buffer.isBuffer(f.value)) out.push(decodeStored(f.value));
  return out;
}

function decodeStored(buf: Buffer): Sandbox {
  const s: Sandbox = { id: '', namespace: '', name: '', uid: '', ready: false, creating: true };
  for (const f of protoFields(buf)) {
    if (f.field === 1) s.id = text(f.value);
    else if (f.field === 4 && Buffer.isBuffer(f.value)) {
      const kv = [...protoFields(f.value)];
      const key = text(kv.find((x) => x.field === 1)?.value ?? 0);
      const value = text(kv.find((x) => x.field === 2)?.value ?? 0);
      const parts = value.split('_');
      if (key === 'name' && parts.length === 4) [s.name, s.namespace, s.uid] = parts as [string, string, string];
    }
  }
  return s;
}

/** libcni's cniCacheV1 entry (cachedInfo): the network config base64-encoded, the runtime's CNI_ARGS as pairs. */
export interface CacheFile {
  kind?: string;
  containerId?: string;
  ifName?: string;
  networkName?: string;
  netns?: string;
  config?: string;
  cniArgs?: [string, string][];
  capabilityArgs?: Record<string, unknown>;
  result?: { cniVersion?: string; ips?: { address?: string }[] };
}

/** A cached network config as a list (cachedConfig). */
export interface NetConfList {
  cniVersion?: string;
  name?: string;
  plugins: PluginConf[];
}

export interface PluginConf {
  type: string;
  capabilities?: Record<string, boolean>;
  ipam?: { type?: string };
  [key: string]: unknown;
}

/** The network config libcni cached (a conflist, or one plugin's conf that libcni ran as a list of one). */
export function cachedConfig(a: CachedAttachment): NetConfList | undefined {
  try {
    const raw = JSON.parse(Buffer.from(a.entry.config ?? '', 'base64').toString('utf8')) as NetConfList & PluginConf;
    const plugins = Array.isArray(raw.plugins) ? raw.plugins : [raw];
    return plugins.every((p) => typeof p?.type === 'string') ? { cniVersion: raw.cniVersion, name: raw.name, plugins } : undefined;
  } catch {
    return undefined;
  }
}

/** Plugin and IPAM types of a cached config (base64 of a conflist or of a single plugin's conf); '?' for a plugin without one. */
function chainOf(config: string | undefined): { plugins: string[]; ipam: string[] } {
  try {
    const conf = JSON.parse(Buffer.from(config ?? '', 'base64').toString('utf8')) as Partial<PluginConf> & {
      plugins?: Partial<PluginConf>[];
    };
    const chain = conf.plugins ?? [conf];
    return { plugins: chain.map((p) => p.type ?? '?'), ipam: chain.flatMap((p) => (p.ipam?.type ? [p.ipam.type] : [])) };
  } catch {
    return { plugins: [], ipam: [] };
  }
}

/** libcni's result caches; files that are not a cniCacheV1 entry are left out (and listed in `unreadable`). */
export function readCache(cacheDirs: string[]): { attachments: CachedAttachment[]; unreadable: string[] } {
  const attachments: CachedAttachment[] = [];
  const unreadable: string[] = [];
  const files = cacheDirs.flatMap((d) => {
    const dir = path.join(d, 'results');
    return fs.existsSync(dir)
      ? fs
          .readdirSync(dir)
          .sort()
          .map((n) => path.join(dir, n))
      : [];
  });
  for (const file of files) {
    let c: CacheFile;
    try {
      c = JSON.parse(fs.readFileSync(file, 'utf8')) as CacheFile;
    } catch {
      unreadable.push(file);
      continue;
    }
    if (c.kind !== 'cniCacheV1' || !c.containerId || !c.networkName || !c.ifName) {
      unreadable.push(file);
      continue;
    }
    const ips = (c.result?.ips ?? []).map((i) => (i.address ?? '').split('/')[0]!).filter(Boolean);
    attachments.push({ file, network: c.networkName, containerId: c.containerId, ifName: c.ifName, ...chainOf(c.config), ips, entry: c });
  }
  return { attachments, unreadable };
}

/** host-local's leases: one file per IP, named by the IP, holding the container ID and (since 0.7) the ifname. */
export function readHostLocalLeases(dataDir: string): Lease[] {
  const leases: Lease[] = [];
  for (const network of fs.existsSync(dataDir) ? fs.readdirSync(dataDir).sort() : []) {
    const dir = path.join(dataDir, network);
    if (!fs.statSync(dir).isDirectory()) continue;
    for (const ip of fs.readdirSync(dir).sort()) {
      if (ip === 'lock' || ip.startsWith('last_reserved_ip')) continue;
      const [containerId, ifName] = fs.readFileSync(path.join(dir, ip), 'utf8').split(/\r?\n/);
      if (containerId) leases.push({ network, ip, containerId: containerId.trim(), ...(ifName?.trim() ? { ifName: ifName.trim() } : {}) });
    }
  }
  return leases;
}

/**
 * terwayd's leases, from its state file ({version, leases: [{key, ip, ip6?, eniId, containerId, reservedUntil?}]}).
 * A lease reserved for a pod's return (reservedUntil in the future) is terwayd's on purpose, not a pod's: left
 * out. No file: no terway on the node.
 */
export function readTerwayLeases(file: string, now = Date.now()): TerwayLease[] {
  let j: { leases?: { ip?: string; ip6?: string; eniId?: string; containerId?: string; reservedUntil?: number }[] };
  try {
    j = JSON.parse(fs.readFileSync(file, 'utf8')) as typeof j;
  } catch {
    return [];
  }
  return (Array.isArray(j.leases) ? j.leases : [])
    .filter((l) => l.ip && l.containerId && !((l.reservedUntil ?? 0) > now))
    .map((l) => ({ ip: l.ip!, ...(l.ip6 ? { ip6: l.ip6 } : {}), eniId: l.eniId ?? '', containerId: l.containerId! }));
}

/**
 * gcp-ipam's records (packages/gcp-ipam/src/plugin.ts: {allocation, ip, pool, network}), one per attachment, named
 * `<containerID>_<ifname>` (a container ID has no `_`). No directory: no gcp-ipam on the node.
 */
export function readGcpRecords(stateDir: string): GcpRecord[] {
  const dir = path.join(stateDir, 'containers');
  let files: string[];
  try {
    files = fs.readdirSync(dir);
  } catch {
    return [];
  }
  const out: GcpRecord[] = [];
  for (const f of files) {
    const m = /^([^_]+)_(.+)$/.exec(f);
    if (!m || f.endsWith('.tmp')) continue;
    try {
      const r = JSON.parse(fs.readFileSync(path.join(dir, f), 'utf8')) as { allocation?: string; ip?: string; network?: string };
      if (r.ip) out.push({ network: r.network ?? '', ip: r.ip, containerId: m[1]!, ifName: m[2]!, allocation: r.allocation ?? '' });
    } catch {
      /* being written or gone */
    }
  }
  return out;
}

/**
 * cilium-eni-agent's book, asked on its socket with the plugin's own client (`{"op":"leases"}`, read-only): every
 * IP it handed out, with its owner and ENI. The agent holds the book in memory (status.ipam.used is its copy), so
 * the agent is asked, not the CiliumNode. An owner is `<containerID>/<ifname>` (a container ID has no `/`); an IP
 * with none (a used entry the agent restored without one) is a row of its own, `cilium-eni:<ip>`.
 * No socket: no agent on the node (undefined). An agent that refuses, does not answer or does not know the op: an
 * error, for the caller to list as unreadable.
 */
export async function readCiliumLeases(socket: string, timeoutMs = 10_000): Promise<CiliumLease[] | undefined> {
  let reply: AgentReply;
  try {
    reply = await agentRequest(socket, { op: 'leases', owner: '' }, timeoutMs);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
  if (!reply.ok) throw new Error(`the agent refused (code ${reply.code}): ${reply.msg}`);
  return (reply.leases ?? []).map((l) => {
    const slash = l.owner.indexOf('/');
    return {
      ip: l.ip,
      containerId: slash > 0 ? l.owner.slice(0, slash) : l.owner || `cilium-eni:${l.ip}`,
      ifName: slash > 0 ? l.owner.slice(slash + 1) : '',
      eniId: l.eni,
    };
  });
}

/**
 * The node's VM as GCE sees it, asked with the ipam section of a gcp-ipam attachment libcni cached (the node's
 * own project, zone, instance and credentials); undefined when no cached attachment uses gcp-ipam.
 */
export async function readGcpCloud(cached: CachedAttachment[]): Promise<GcpCloud | undefined> {
  for (const a of cached.filter((c) => c.ipam.includes('gcp-ipam'))) {
    const list = cachedConfig(a);
    const p = list?.plugins.find((x) => x.ipam?.type === 'gcp-ipam');
    if (!p) continue; // an unreadable entry: another may do
    const conf = { ...p, name: list!.name, cniVersion: list!.cniVersion };
    try {
      const n = await nodeAliases(conf as unknown as Parameters<typeof nodeAliases>[0]);
      return { instance: n.instance, aliases: n.aliases, ...(n.error ? { error: n.error } : {}) };
    } catch (err) {
      return { instance: '?', aliases: [], error: `the cached gcp-ipam config: ${(err as Error).message}` };
    }
  }
  return undefined;
}

/**
 * The ENIs cilium-eni-agent's book names, as EC2 holds them (one DescribeNetworkInterfaces, one attempt);
 * undefined when the book names none. The EC2 client is loaded only here: `--cloud` is the only path that needs it.
 */
export async function readCiliumCloud(
  leases: CiliumLease[],
  o: { ec2Endpoint?: string; region?: string },
): Promise<CiliumCloud | undefined> {
  const ids = eniIds(leases);
  if (ids.length === 0) return undefined;
  return withReader(
    () => import('@cnikit/cilium-eni-ipam/cloud'),
    (r) => r.eniAddresses(ids, { endpoint: o.ec2Endpoint, region: o.region }),
  );
}

/**
 * The ENIs terwayd's leases name, as ECS holds them (region and instance from the metadata service, keys from
 * the environment; one attempt); undefined when no lease names one. The client is loaded only here (--cloud).
 */
export async function readTerwayCloud(
  leases: TerwayLease[],
  o: { aliyunMetadata?: string; aliyunEndpoint?: string },
): Promise<TerwayCloud | undefined> {
  const ids = eniIds(leases);
  if (ids.length === 0) return undefined;
  return withReader(
    () => import('@cnikit/terway/cloud'),
    (r) => r.nodeEnis(ids, { metadataUrl: o.aliyunMetadata, ecsEndpoint: o.aliyunEndpoint }),
  );
}

/** The ENIs leases name (an empty ID: a lease made before its ENI was known). */
const eniIds = (leases: { eniId: string }[]): string[] => [...new Set(leases.map((l) => l.eniId).filter(Boolean))];

/**
 * Loads a cloud reader, only with --cloud, and reads with it. An image carries the readers of its own family only
 * (docs/build.md, "Lazy modules"): elsewhere the import fails, and the cloud is an unreadable source saying which
 * image has it.
 */
async function withReader<R, C>(
  load: () => Promise<R>,
  read: (reader: R) => Promise<C>,
): Promise<C | { enis: Record<string, never>; error: string }> {
  let reader: R;
  try {
    reader = await load();
  } catch (err) {
    return { enis: {}, error: (err as Error).message };
  }
  return read(reader);
}

/** Host ends the veth plugin made, found by the alias it sets (`cnikit-veth:<network>:<containerID>`). */
export async function hostVeths(ns: Netns = hostNetns()): Promise<HostVeth[]> {
  const out: HostVeth[] = [];
  for (const l of await link.list(ns)) {
    const m = /^cnikit-veth:(.+):([^:]+)$/.exec(l.alias ?? '');
    if (m) out.push({ name: l.name, network: m[1]!, containerId: m[2]! });
  }
  return out;
}

/** Coil's host veths (alias `COIL:<pool>:<containerID>:<ifname>`), each with the addresses its pod table routes to it. */
export async function coilVeths(ns: Netns = hostNetns(), table = COIL_POD_TABLE): Promise<CoilVeth[]> {
  const links = (await link.list(ns)).flatMap((l) => {
    const m = /^COIL:([^:]+):([^:]+):([^:]+)$/.exec(l.alias ?? '');
    return m ? [{ index: l.index, veth: { name: l.name, pool: m[1]!, containerId: m[2]!, ifName: m[3]!, ips: [] as string[] } }] : [];
  });
  if (links.length === 0) return [];
  const routes = await route.list(ns, { table });
  for (const { index, veth } of links)
    for (const r of routes) if (r.oif === index && /\/(32|128)$/.test(r.dst)) veth.ips.push(r.dst.split('/')[0]!);
  return links.map((l) => l.veth);
}

/** router's host routes, found by their protocol (RTPROT_ROUTER) in every table, as router's own DEL and GC find them. */
export async function routerRoutes(ns: Netns = hostNetns()): Promise<RouterRoute[]> {
  const routes = await route.list(ns, { table: 0, protocol: RTPROT_ROUTER });
  if (routes.length === 0) return [];
  const names = new Map((await link.list(ns)).map((l) => [l.index, l.name]));
  return routes.map((r) => ({
    ip: r.dst.split('/')[0]!,
    table: r.table ?? 254,
    link: names.get(r.oif ?? 0) ?? `#${r.oif}`,
    key: r.metric ?? 0,
  }));
}

export interface SourceOptions {
  criSocket: string;
  /** libcni cache dirs, the runtime's first (its DEL of Multus's network reaches the delegates cached after it). */
  cacheDirs: string[];
  hostLocalDir: string;
  /** terwayd's lease store (--state); absent when terway does not run on the node. */
  terwayState?: string;
  /** gcp-ipam's stateDir (its records); absent when gcp-ipam does not run on the node. */
  gcpState?: string;
  /** cilium-eni-agent's socket (its --socket); absent when the agent does not run on the node. */
  ciliumSocket?: string;
  /** Ask the clouds of the node's cloud IPAMs (gcp-ipam: the VM's aliases; cilium-eni-ipam: its ENIs' addresses); off by default (it costs API quota). */
  cloud?: boolean;
  /** EC2 endpoint override for cilium-eni-ipam's ENIs with --cloud (moto, a proxy); default: the region's. */
  ec2Endpoint?: string;
  /** AWS region of the node (--cloud); default: AWS_REGION, else us-east-1. */
  region?: string;
  /** Alibaba Cloud's instance metadata service for terway's ENIs with --cloud; default http://100.100.100.200. */
  aliyunMetadata?: string;
  /** ECS endpoint override for terway's ENIs with --cloud (`host[:port]` or a URL); default: the region's. */
  aliyunEndpoint?: string;
}

export interface NodeRead {
  sources: NodeSources;
  unreadable: string[];
  /** Whether sandboxes being created were read (containerd's store); without it they look gone. */
  seesCreating: boolean;
}

/**
 * Everything `doctor node` joins, read now. The runtime is asked last: a sandbox is in containerd's store before
 * its network is set up, so every object read belongs to a sandbox the runtime then names, unless it is gone.
 */
export async function readNode(o: SourceOptions): Promise<NodeRead> {
  const cache = readCache(o.cacheDirs);
  const leases = readHostLocalLeases(o.hostLocalDir);
  const terway = readTerwayLeases(o.terwayState ?? TERWAY_STATE);
  const gcp = readGcpRecords(o.gcpState ?? GCP_IPAM_STATE);
  const gcpCloud = o.cloud ? await readGcpCloud(cache.attachments) : undefined;
  const ciliumSocket = o.ciliumSocket ?? CILIUM_SOCKET;
  let cilium: CiliumLease[] | undefined;
  let ciliumError: string | undefined;
  try {
    cilium = await readCiliumLeases(ciliumSocket);
  } catch (err) {
    ciliumError = `cilium-eni-agent (${ciliumSocket}): ${(err as Error).message}`;
  }
  const ciliumCloud = o.cloud && cilium ? await readCiliumCloud(cilium, o) : undefined;
  const terwayCloud = o.cloud ? await readTerwayCloud(terway, o) : undefined;
  const veths = await hostVeths();
  const coil = await coilVeths();
  const router = await routerRoutes();
  const stored = await containerdSandboxes(o.criSocket);
  const sandboxes = await criSandboxes(o.criSocket);
  const listed = new Set(sandboxes.map((x) => x.id));
  sandboxes.push(...(stored ?? []).filter((x) => !listed.has(x.id)));
  return {
    sources: {
      sandboxes,
      cached: cache.attachments,
      leases,
      veths,
      coil,
      router,
      terway,
      gcp,
      gcpCloud,
      ...(cilium ? { cilium } : {}),
      ...(ciliumCloud ? { ciliumCloud } : {}),
      ...(terwayCloud ? { terwayCloud } : {}),
    },
    unreadable: [
      ...cache.unreadable,
      ...(gcpCloud?.error ? [`GCE (instance ${gcpCloud.instance}): ${gcpCloud.error}`] : []),
      ...(ciliumError ? [ciliumError] : []),
      ...(ciliumCloud?.error ? [`EC2 (the ENIs of cilium-eni-agent's book): ${ciliumCloud.error}`] : []),
      ...(terwayCloud?.error ? [`ECS (the ENIs of terwayd's leases): ${terwayCloud.error}`] : []),
    ],
    seesCreating: stored !== undefined,
  };
}
