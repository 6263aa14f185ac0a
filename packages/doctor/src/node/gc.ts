/**
 * `doctor node --gc`: reclaims what sandboxes the runtime no longer knows left on the node, the way libcni's
 * GCNetworkList does for a runtime that calls it (containerd does not yet: go-cni #131):
 *   1. DEL: each cached attachment of a gone sandbox is deleted with what libcni cached at ADD (the network
 *      config, the result as prevResult, the netns while it exists, the runtime's CNI_ARGS), each plugin of the
 *      chain in reverse order, then its cache entry removed. The runtime's entries go first: Multus's DEL
 *      reaches its delegates and removes their entries itself.
 *   2. GC: objects still held by gone sandboxes (a host veth, a Coil pod, a router host route, a gcp-ipam record,
 *      a cilium-eni-agent or terwayd lease without a cache entry: an ADD killed before the runtime cached it) are collected
 *      by GC of each plugin of the network that speaks CNI 1.1.0, with cni.dev/valid-attachments: every
 *      attachment of the network that a sandbox the runtime knows holds.
 *   3. Release: host-local leases still held by gone sandboxes. host-local has no GC (containernetworking/
 *      plugins #1047), so its DEL with the network's IPAM config, the lease's container ID and ifname.
 * Gone means unknown to the runtime: a stopped sandbox is the kubelet's to tear down, and a sandbox being created
 * is in containerd's store before its first CNI call (sources.ts). Each step reads the node and asks the runtime
 * again, so a sandbox that appears meanwhile is never touched. Without containerd's store (another runtime),
 * nothing is applied: a pod being created would look gone.
 */
import * as fs from 'node:fs';
import { CniError, compareVersions, execDelegate } from '@cnikit/netlib';
import { networkTag, networkTagOfKey } from '@cnikit/router/marks';
import { joinNode, routerOwners, type NodeRow, type NodeSources } from './join';
import {
  cachedConfig,
  readNode,
  type CachedAttachment,
  type Lease,
  type NetConfList,
  type PluginConf,
  type SourceOptions,
} from './sources';

export interface GcOptions extends SourceOptions {
  binDirs: string[];
  apply: boolean;
}

export interface GcStep {
  step: 'del' | 'gc' | 'release';
  network: string;
  /** del: the attachment's container; gc: the plugin; release: the lease's container. */
  target: string;
  what: string;
  /** Set once applied: whether it succeeded, and why not. */
  ok?: boolean;
  error?: string;
}

export interface GcReport {
  applied: boolean;
  steps: GcStep[];
  /** The gone sandboxes' rows before and after (after = before on a dry run). */
  before: NodeRow[];
  after: NodeRow[];
}

const goneRows = (s: NodeSources): NodeRow[] => joinNode(s).filter((r) => r.sandbox === 'gone');
const goneIds = (s: NodeSources): Set<string> => new Set(goneRows(s).map((r) => r.containerId));

/** One config per network, from the cache entries of any sandbox (a live pod's entry names a gone one's network). */
function configsByNetwork(s: NodeSources): Map<string, NetConfList> {
  const out = new Map<string, NetConfList>();
  for (const a of s.cached) {
    const conf = out.has(a.network) ? undefined : cachedConfig(a);
    if (conf) out.set(a.network, conf);
  }
  return out;
}

function planDels(s: NodeSources, gone: Set<string>): GcStep[] {
  return s.cached
    .filter((a) => gone.has(a.containerId))
    .map((a) => ({
      step: 'del',
      network: a.network,
      target: a.containerId,
      what: `DEL ${a.network}/${a.ifName} (${a.plugins.join(', ') || 'unreadable config'}) with the cached config and result`,
    }));
}

/** The IPAM type of cilium-eni-ipam: its agent holds the IPs of every network using it on the node, by owner only. */
const CILIUM_IPAM = 'cilium-eni-ipam';

/**
 * The networks whose chain has a plugin `is` matches, in the node's cached configs; a placeholder naming `what` when
 * there is none (the step then says that what was left stays).
 */
function chainsWith(configs: Map<string, NetConfList>, is: (p: PluginConf) => boolean, what: string): string[] {
  const nets = [...configs].filter(([, c]) => c.plugins.some(is)).map(([n]) => n);
  return nets.length ? nets : [`(a ${what} network)`];
}

/**
 * Objects of gone sandboxes that no cache entry covers, so a DEL will not reach them: host veths (by network),
 * router's host routes (by the network tag of their key), gcp-ipam records (by the network they name), leases.
 * Daemons that know attachments but not networks are reached through every network whose chain has them: coild
 * (Coil's host veths, by container and ifname), cilium-eni-agent (leases by owner: the chain's IPAM) and terwayd
 * (leases by sandbox: the chain's terway).
 */
function uncovered(s: NodeSources, gone: Set<string>, configs: Map<string, NetConfList>): { networks: Set<string>; leases: Lease[] } {
  const cached = new Set(s.cached.map((a) => `${a.network}\0${a.containerId}`));
  const open = (network: string, id: string): boolean => gone.has(id) && !cached.has(`${network}\0${id}`);
  const cachedBy = (has: (a: CachedAttachment) => boolean): Set<string> =>
    new Set(s.cached.filter(has).flatMap((a) => [a.containerId, `${a.containerId}\0${a.ifName}`]));
  const coilCached = cachedBy((a) => a.plugins.includes('coil'));
  const ciliumCached = cachedBy((a) => a.ipam.includes(CILIUM_IPAM));
  const terwayCached = cachedBy((a) => a.plugins.includes('terway'));
  const left = (objects: { containerId: string; ifName?: string }[], cov: Set<string>): boolean =>
    objects.some((o) => gone.has(o.containerId) && !cov.has(o.ifName === undefined ? o.containerId : `${o.containerId}\0${o.ifName}`));
  return {
    networks: new Set([
      ...s.veths.filter((v) => open(v.network, v.containerId)).map((v) => v.network),
      ...(left(s.coil, coilCached) ? chainsWith(configs, (p) => p.type === 'coil', 'Coil') : []),
      ...routerLeft(s, configs, open),
      ...(s.gcp ?? []).filter((r) => open(r.network, r.containerId)).map((r) => r.network),
      ...(left(s.cilium ?? [], ciliumCached) ? chainsWith(configs, (p) => p.ipam?.type === CILIUM_IPAM, CILIUM_IPAM) : []),
      // terwayd records no ifname: a lease is its sandbox's
      ...(left(s.terway, terwayCached) ? chainsWith(configs, (p) => p.type === 'terway', 'terway') : []),
    ]),
    leases: s.leases.filter((l) => open(l.network, l.containerId)),
  };
}

/** Networks of router host routes held by gone sandboxes (or by none): the network's tag is in the route's key. */
function routerLeft(s: NodeSources, configs: Map<string, NetConfList>, open: (network: string, id: string) => boolean): string[] {
  const owners = routerOwners(s);
  const byTag = new Map([...configs.keys()].map((n) => [networkTag(n), n]));
  return s.router.flatMap((r) => {
    const network = byTag.get(networkTagOfKey(r.key)) ?? `(the router network of key ${r.key})`;
    return open(network, owners.get(r.key) ?? `router-key:${r.key}`) ? [network] : [];
  });
}

function planCollect(s: NodeSources, gone: Set<string>): GcStep[] {
  const configs = configsByNetwork(s);
  const left = uncovered(s, gone, configs);
  const steps: GcStep[] = [];
  for (const network of [...left.networks].sort()) {
    const conf = configs.get(network);
    steps.push({
      step: 'gc',
      network,
      target: conf ? conf.plugins.map((p) => p.type).join(', ') : '-',
      what: conf
        ? `GC of ${network}'s plugins (or their IPAM) that speak CNI 1.1.0`
        : `no config of ${network} on the node: what it left stays`,
    });
  }
  for (const l of left.leases) {
    const ipam = configs.get(l.network)?.plugins.find((p) => p.ipam?.type === 'host-local');
    steps.push({
      step: 'release',
      network: l.network,
      target: l.containerId,
      what: ipam
        ? `host-local DEL of ${l.ip} (${l.ifName ?? 'no ifname'})`
        : `no host-local config of ${l.network} on the node: ${l.ip} stays`,
    });
  }
  return steps;
}

/** A plugin's conf as libcni builds it from a list: the list's name and version, runtimeConfig from its capabilities. */
function pluginConf(list: NetConfList, p: PluginConf, capabilityArgs: Record<string, unknown> | undefined): Record<string, unknown> {
  const conf: Record<string, unknown> = { ...p, name: list.name, cniVersion: list.cniVersion };
  const runtimeConfig = Object.fromEntries(Object.entries(capabilityArgs ?? {}).filter(([k]) => p.capabilities?.[k]));
  if (Object.keys(runtimeConfig).length) conf.runtimeConfig = runtimeConfig;
  return conf;
}

const message = (err: unknown): string =>
  err instanceof CniError ? `${err.message}${err.details ? `: ${err.details}` : ''}` : (err as Error).message;

/** libcni's DEL of a cached attachment: the chain in reverse, prevResult from 0.4.0 up, the netns while it exists. */
async function delCached(a: CachedAttachment, binDirs: string[]): Promise<void> {
  const list = cachedConfig(a);
  if (!list) throw new Error(`${a.file}: its cached config cannot be read`);
  const netns = a.entry.netns && fs.existsSync(a.entry.netns) ? a.entry.netns : '';
  const args = Object.fromEntries(a.entry.cniArgs ?? []);
  const withResult = !!list.cniVersion && compareVersions(list.cniVersion, '0.4.0') >= 0 && !!a.entry.result;
  for (const p of [...list.plugins].reverse()) {
    const conf = pluginConf(list, p, a.entry.capabilityArgs);
    if (withResult) conf.prevResult = a.entry.result;
    await execDelegate(p.type, 'DEL', Buffer.from(JSON.stringify(conf)), {
      containerId: a.containerId,
      netns,
      ifName: a.ifName,
      args,
      path: binDirs,
    });
  }
  fs.rmSync(a.file, { force: true });
}

/**
 * Every attachment of `network` a sandbox the runtime knows may hold: each such sandbox (ready, stopped or being
 * created) with each ifname the network is seen with on the node (cache entries, leases; eth0 when none). Wider
 * than what is cached, so that a pod whose ADD has not been cached yet keeps what it has. A network whose IPAM is
 * cilium-eni-ipam gets the ifnames of every network using it and of every lease the agent holds: the agent's GC
 * frees every owner not listed, whatever its network.
 */
export function validAttachments(s: NodeSources, list: NetConfList): { containerID: string; ifname: string }[] {
  const network = list.name ?? '';
  const cilium = list.plugins.some((p) => p.ipam?.type === CILIUM_IPAM);
  const ifnames = new Set([
    ...s.cached.filter((a) => a.network === network || (cilium && a.ipam.includes(CILIUM_IPAM))).map((a) => a.ifName),
    ...s.leases.filter((l) => l.network === network).flatMap((l) => (l.ifName ? [l.ifName] : [])),
    ...(s.gcp ?? []).filter((r) => r.network === network).map((r) => r.ifName),
    ...(cilium ? (s.cilium ?? []).flatMap((l) => (l.ifName ? [l.ifName] : [])) : []),
  ]);
  if (ifnames.size === 0) ifnames.add('eth0');
  return s.sandboxes.flatMap((sb) => [...ifnames].sort().map((ifname) => ({ containerID: sb.id, ifname })));
}

async function speaks11(type: string, binDirs: string[]): Promise<boolean> {
  const out = await execDelegate(type, 'VERSION', Buffer.from('{"cniVersion":"1.1.0"}'), { path: binDirs }, { timeoutMs: 10_000 });
  const versions = (JSON.parse(out.toString()) as { supportedVersions?: unknown }).supportedVersions;
  return Array.isArray(versions) && versions.includes('1.1.0');
}

/**
 * GC of each plugin of the network that speaks 1.1.0, at 1.1.0: a network behind Multus is often declared at 1.0.0
 * for plugins that speak no later version (macvlan), and the real Multus forwards no GC to its delegates. A plugin
 * that does not speak it (Debian's ptp) cannot pass GC on to its IPAM: the IPAM's GC is called instead, with the
 * plugin's conf (its `ipam` section), as a 1.1.0 plugin would delegate it (gcp-ipam under GKE's ptp).
 */
async function gcNetwork(s: NodeSources, list: NetConfList, binDirs: string[]): Promise<string[]> {
  const ran: string[] = [];
  const valid = validAttachments(s, list);
  for (const p of list.plugins) {
    const ipam = p.ipam?.type;
    const type = (await speaks11(p.type, binDirs)) ? p.type : ipam && (await speaks11(ipam, binDirs)) ? ipam : undefined;
    if (!type) continue;
    const conf = { ...pluginConf(list, p, undefined), cniVersion: '1.1.0', 'cni.dev/valid-attachments': valid };
    await execDelegate(type, 'GC', Buffer.from(JSON.stringify(conf)), { path: binDirs });
    ran.push(type === p.type ? type : `${type} (the ipam of ${p.type})`);
  }
  return ran;
}

async function releaseLease(l: Lease, list: NetConfList, binDirs: string[]): Promise<void> {
  const p = list.plugins.find((x) => x.ipam?.type === 'host-local')!;
  const conf = { cniVersion: list.cniVersion, name: list.name, ipam: p.ipam };
  await execDelegate('host-local', 'DEL', Buffer.from(JSON.stringify(conf)), {
    containerId: l.containerId,
    ifName: l.ifName ?? 'eth0',
    path: binDirs,
  });
}

/** Runs one step, recording the outcome on it; a failed step does not stop the others (as GC keeps going). */
async function attempt(step: GcStep, fn: () => Promise<unknown>): Promise<void> {
  try {
    await fn();
    step.ok = true;
  } catch (err) {
    step.ok = false;
    step.error = message(err);
  }
}

async function applyDels(o: GcOptions): Promise<GcStep[]> {
  const steps: GcStep[] = [];
  const tried = new Set<string>();
  // one entry at a time, re-read each time: a DEL (Multus's) may remove entries after it, and a sandbox may appear
  for (;;) {
    const { sources } = await readNode(o);
    const gone = goneIds(sources);
    const a = sources.cached.find((x) => gone.has(x.containerId) && !tried.has(x.file));
    if (!a) return steps;
    tried.add(a.file);
    const [step] = planDels({ ...sources, cached: [a] }, gone);
    await attempt(step!, () => delCached(a, o.binDirs));
    steps.push(step!);
  }
}

async function applyCollect(o: GcOptions): Promise<GcStep[]> {
  const { sources } = await readNode(o);
  const gone = goneIds(sources);
  const configs = configsByNetwork(sources);
  const steps = planCollect(sources, gone);
  for (const step of steps) {
    const list = configs.get(step.network);
    if (!list) continue;
    if (step.step === 'gc') {
      await attempt(step, async () => {
        // fresh: a sandbox created since the read above is in the runtime's answer now
        const now = await readNode(o);
        step.target = (await gcNetwork(now.sources, list, o.binDirs)).join(', ') || 'no plugin speaks 1.1.0';
      });
    } else {
      const lease = sources.leases.find((l) => l.network === step.network && l.containerId === step.target)!;
      await attempt(step, () => releaseLease(lease, list, o.binDirs));
    }
  }
  return steps;
}

/** What --apply would do now: a DEL per cached attachment of a gone sandbox, then GC and releases for the rest. */
export function planGc(s: NodeSources): GcStep[] {
  const gone = goneIds(s);
  return [...planDels(s, gone), ...planCollect(s, gone)];
}

export async function gcNode(o: GcOptions): Promise<GcReport> {
  const first = await readNode(o);
  const before = goneRows(first.sources);
  if (!o.apply) return { applied: false, steps: planGc(first.sources), before, after: before };
  if (!first.seesCreating) {
    throw new Error('the runtime has no containerd sandbox store: a pod being created would look gone, so --apply is refused');
  }
  const steps = [...(await applyDels(o)), ...(await applyCollect(o))];
  return { applied: true, steps, before, after: goneRows((await readNode(o)).sources) };
}

export function formatGc(r: GcReport): string {
  const lines = r.steps.map((s) => {
    const outcome = s.ok === undefined ? '' : s.ok ? '  ok' : `  FAILED: ${s.error}`;
    return `${s.step.padEnd(8)} ${s.network.padEnd(20)} ${s.target.slice(0, 40).padEnd(40)} ${s.what}${outcome}`;
  });
  const objects = (rows: NodeRow[]): number => rows.reduce((n, x) => n + x.objects.length, 0);
  const summary = r.applied
    ? `freed ${objects(r.before) - objects(r.after)} of ${objects(r.before)} objects of ${r.before.length} gone sandboxes; ${objects(r.after)} left`
    : `dry run: ${objects(r.before)} objects of ${r.before.length} gone sandboxes; --apply reclaims them`;
  return `${lines.length ? `${'STEP'.padEnd(8)} ${'NETWORK'.padEnd(20)} ${'TARGET'.padEnd(40)} ACTION\n${lines.join('\n')}\n` : 'nothing to reclaim\n'}${summary}\n`;
}
