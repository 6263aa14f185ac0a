/**
 * ENI multi-IP with veth policy routing (Terway's `eniip_virtual_type: veth`):
 *
 *   pod:  eth0 podIP/32; 169.254.1.1 dev eth0 scope link; default via
 *         169.254.1.1 dev eth0 onlink; PERMANENT 169.254.1.1 -> host veth MAC
 *   host: veth cali<sha1(ns.name)[:11]>; podIP/32 dev cali* scope link (main);
 *         `to podIP lookup main pref 512`; `from podIP lookup 1000+<ENI ifindex> pref 2048`;
 *         table 1000+<ENI ifindex>: default via <vSwitch gateway> dev <ENI> onlink;
 *         forwarding=1, rp_filter=0 on the ENI and the host veth
 *   bandwidth: tbf on the pod eth0 (egress) and the host veth (ingress)
 *   dual stack (ip_stack dual): the same with IPv6: pod ip6/128, default via
 *         fe80::1 dev eth0 (PERMANENT -> host veth MAC); host ip6/128 dev cali*,
 *         v6 rules at the same prefs, the ENI table's v6 default via the vSwitch's
 *         IPv6 gateway; IPv6 forwarding on
 *
 * The kernel holds the state: the rules' prefs and tables and the host veth
 * name tie a pod IP to its ENI and its pod, so repair() can rebuild or prune
 * them from the list of live pods alone.
 */
import type * as Crypto from 'node:crypto';
import { addr, ignoreExists, ignoreNotFound, link, neigh, route, rule, sysctl, UndoStack, type Netns } from '@cnikit/netlib';
import { setRate, type BandwidthLimits } from './bandwidth';

export const PREF_TO_POD = 512;
export const PREF_FROM_POD = 2048;
export const ENI_TABLE_BASE = 1000;
export const MAIN_TABLE = 254;
export const POD_GATEWAY = '169.254.1.1';
/** The pod's IPv6 next hop: a link-local address answered by a permanent neighbour (no NDP needed). */
export const POD_GATEWAY6 = 'fe80::1';
const SCOPE_LINK = 253;

/** Terway's host veth name: `cali` + sha1("<namespace>.<name>")[:11]. */
export function hostVethName(podNamespace: string, podName: string): string {
  // Required here: loading node:crypto (and the streams it pulls in) cost the binary's STATUS and VERSION ~5 ms.
  const { createHash } = require('node:crypto') as typeof Crypto;
  return `cali${createHash('sha1').update(`${podNamespace}.${podName}`).digest('hex').slice(0, 11)}`;
}

export function eniTable(eniIndex: number): number {
  return ENI_TABLE_BASE + eniIndex;
}

/** The host link of an ENI, found by its MAC (names change across reboots: Terway issue #141). */
export async function findEniLink(hostNs: Netns, mac: string): Promise<link.Link> {
  const want = mac.toLowerCase();
  const l = (await link.list(hostNs)).find((x) => x.mac.toLowerCase() === want && !x.name.startsWith('cali'));
  if (!l) throw new Error(`datapath: no link with the ENI MAC ${mac} on the host`);
  return l;
}

/** Brings an ENI up and (re)writes its table: default via the vSwitch gateway. Idempotent. */
export async function ensureEni(
  hostNs: Netns,
  eni: { mac: string; gateway: string; gateway6?: string },
): Promise<{ index: number; name: string; table: number }> {
  const l = await findEniLink(hostNs, eni.mac);
  if (!l.up) await link.setUp(hostNs, l.index);
  const table = eniTable(l.index);
  await route.replace(hostNs, { dst: `${eni.gateway}/32`, oif: l.index, scope: SCOPE_LINK, table });
  await route.replace(hostNs, { dst: 'default', gw: eni.gateway, oif: l.index, onlink: true, table });
  if (eni.gateway6) {
    sysctl.set(hostNs, `net/ipv6/conf/${l.name}/disable_ipv6`, 0);
    sysctl.set(hostNs, 'net/ipv6/conf/all/forwarding', 1);
    await route.replace(hostNs, { dst: 'default', family: 6, gw: eni.gateway6, oif: l.index, onlink: true, table });
  }
  sysctl.set(hostNs, `net/ipv4/conf/${l.name}/rp_filter`, 0);
  sysctl.set(hostNs, 'net/ipv4/conf/all/rp_filter', 0);
  sysctl.set(hostNs, 'net/ipv4/ip_forward', 1);
  return { index: l.index, name: l.name, table };
}

export interface PodNetwork {
  podNamespace: string;
  podName: string;
  ifName: string;
  ip: string;
  /** Dual stack: the pod's IPv6 (the ENI then needs gateway6). */
  ip6?: string;
  eni: { mac: string; gateway: string; gateway6?: string };
  bandwidth?: BandwidthLimits;
  mtu?: number;
}

/** The veth of a pod, as addPodVeth made it. */
export interface PodVeth {
  hostVeth: string;
  hostVethIndex: number;
  hostVethMac: string;
  podMac: string;
}

export interface PodSetup extends PodVeth {
  eniIndex: number;
  table: number;
}

/**
 * The veth both datapaths give a pod (ENI multi-IP and VPC route): a leftover of the same pod replaced; the
 * pod end up with its /32 and a default route via POD_GATEWAY, answered by a permanent neighbour entry (the
 * host end's MAC); the host end up. Deleting it (the pod end goes with it) is pushed on `undo`.
 */
export async function addPodVeth(
  hostNs: Netns,
  podNs: Netns,
  undo: UndoStack,
  p: { name: string; ifName: string; ip: string; mtu?: number },
): Promise<{ host: link.Link; peer: link.Link }> {
  const { name } = p;
  if (await link.find(hostNs, name)) await ignoreNotFound(link.del(hostNs, name));
  const { link: host, peer } = await link.addVeth(hostNs, { name, peerName: p.ifName, peerNs: podNs, mtu: p.mtu ?? 1500 });
  undo.push(`delete ${name}`, () => ignoreNotFound(link.del(hostNs, name)));
  await link.setUp(podNs, 'lo').catch(() => undefined);
  await link.setUp(podNs, peer.index);
  await ignoreExists(addr.add(podNs, peer.index, `${p.ip}/32`));
  await route.add(podNs, { dst: `${POD_GATEWAY}/32`, oif: peer.index, scope: SCOPE_LINK });
  await route.add(podNs, { dst: 'default', gw: POD_GATEWAY, oif: peer.index, onlink: true });
  await neigh.add(podNs, { index: peer.index, ip: POD_GATEWAY, mac: host.mac });
  await link.setUp(hostNs, host.index);
  return { host, peer };
}

/**
 * Wires a pod. Every change is undone if a later one fails; a leftover host
 * veth of the same pod (a retried ADD) is replaced.
 */
export async function setupPod(hostNs: Netns, podNs: Netns, p: PodNetwork): Promise<PodSetup> {
  const undo = new UndoStack();
  const name = hostVethName(p.podNamespace, p.podName);
  try {
    const eni = await ensureEni(hostNs, p.eni);
    const { host, peer } = await addPodVeth(hostNs, podNs, undo, { ...p, name });
    // Host side.
    sysctl.set(hostNs, `net/ipv4/conf/${name}/rp_filter`, 0);
    await route.replace(hostNs, { dst: `${p.ip}/32`, oif: host.index, scope: SCOPE_LINK });
    undo.push(`route ${p.ip}/32`, () => ignoreNotFound(route.del(hostNs, { dst: `${p.ip}/32`, oif: host.index })));
    await neigh.replace(hostNs, { index: host.index, ip: p.ip, mac: peer.mac });
    await addPodRules(hostNs, p.ip, eni.table);
    undo.push(`rules ${p.ip}`, () => delPodRules(hostNs, p.ip));
    if (p.ip6) {
      if (!p.eni.gateway6) throw new Error(`datapath: pod IPv6 ${p.ip6} without the ENI's IPv6 gateway`);
      sysctl.set(podNs, `net/ipv6/conf/${p.ifName}/disable_ipv6`, 0);
      sysctl.set(hostNs, `net/ipv6/conf/${name}/disable_ipv6`, 0);
      await ignoreExists(addr.add(podNs, peer.index, `${p.ip6}/128`, { noDad: true }));
      await neigh.add(podNs, { index: peer.index, ip: POD_GATEWAY6, mac: host.mac });
      await route.add(podNs, { dst: 'default', family: 6, gw: POD_GATEWAY6, oif: peer.index });
      await route.replace(hostNs, { dst: `${p.ip6}/128`, oif: host.index });
      await neigh.replace(hostNs, { index: host.index, ip: p.ip6, mac: peer.mac });
      await addPodRules(hostNs, p.ip6, eni.table);
      undo.push(`rules ${p.ip6}`, () => delPodRules(hostNs, p.ip6!));
    }
    // Bandwidth.
    if (p.bandwidth?.egressBps) await setRate(podNs, peer.index, p.bandwidth.egressBps);
    if (p.bandwidth?.ingressBps) await setRate(hostNs, host.index, p.bandwidth.ingressBps);
    undo.commit();
    return { hostVeth: name, hostVethIndex: host.index, hostVethMac: host.mac, podMac: peer.mac, eniIndex: eni.index, table: eni.table };
  } catch (e) {
    await undo.unwind();
    throw e;
  }
}

/** The host /32 (IPv4) or /128 (IPv6) of a pod address, and its family. */
function hostPrefix(ipAddr: string): { cidr: string; family: 4 | 6 } {
  return ipAddr.includes(':') ? { cidr: `${ipAddr}/128`, family: 6 } : { cidr: `${ipAddr}/32`, family: 4 };
}

async function addPodRules(hostNs: Netns, ipAddr: string, table: number): Promise<void> {
  const { cidr, family } = hostPrefix(ipAddr);
  await ignoreExists(rule.add(hostNs, { family, priority: PREF_TO_POD, dst: cidr, table: MAIN_TABLE }));
  await ignoreExists(rule.add(hostNs, { family, priority: PREF_FROM_POD, src: cidr, table }));
}

/** Deletes a rule as rule.list() showed it, matched on the fields that tell Terway's rules apart; gone already is fine. */
function delListedRule(hostNs: Netns, family: 4 | 6, r: rule.Rule): Promise<void> {
  return ignoreNotFound(
    rule.del(hostNs, { family, priority: r.priority, table: r.table, ...(r.src ? { src: r.src } : {}), ...(r.dst ? { dst: r.dst } : {}) }),
  );
}

/** Removes every rule of a pod IP (either family) at the Terway prefs (any table). Idempotent. */
export async function delPodRules(hostNs: Netns, ipAddr: string): Promise<void> {
  const { cidr, family } = hostPrefix(ipAddr);
  for (const r of await rule.list(hostNs, family)) {
    if ((r.priority === PREF_TO_POD && r.dst === cidr) || (r.priority === PREF_FROM_POD && r.src === cidr)) {
      await delListedRule(hostNs, family, r);
    }
  }
}

/** DEL: rules, the host route and the veth (the pod end goes with it). Idempotent. */
export async function teardownPod(hostNs: Netns, p: { podNamespace: string; podName: string; ip?: string; ip6?: string }): Promise<void> {
  const name = hostVethName(p.podNamespace, p.podName);
  for (const a of [p.ip, p.ip6]) {
    if (!a) continue;
    await delPodRules(hostNs, a);
    await ignoreNotFound(route.del(hostNs, { dst: hostPrefix(a).cidr, table: MAIN_TABLE }));
  }
  await ignoreNotFound(link.del(hostNs, name));
}

export interface LivePod {
  podNamespace: string;
  podName: string;
  ip: string;
  /** Dual stack: the pod's IPv6 and its ENI's IPv6 gateway. */
  ip6?: string;
  gateway6?: string;
  eniMac: string;
  gateway: string;
}

export interface RepairReport {
  rulesRemoved: string[];
  rulesAdded: string[];
  routesRemoved: string[];
  routesAdded: string[];
}

/**
 * Makes the host match the live pods: removes Terway rules (prefs 512/2048)
 * and cali* host routes of IPs no live pod holds (pods gone without DEL,
 * Terway PRs #171/#746), rewrites rules pointing at the wrong ENI table, and
 * puts back missing rules, host routes and ENI tables of live pods.
 */
export async function repair(hostNs: Netns, live: LivePod[]): Promise<RepairReport> {
  const rep: RepairReport = { rulesRemoved: [], rulesAdded: [], routesRemoved: [], routesAdded: [] };
  const want4 = new Map<string, { table: number; veth: string }>();
  const want6 = new Map<string, { table: number; veth: string }>();
  for (const p of live) {
    const eni = await ensureEni(hostNs, { mac: p.eniMac, gateway: p.gateway, ...(p.ip6 && p.gateway6 ? { gateway6: p.gateway6 } : {}) });
    const veth = hostVethName(p.podNamespace, p.podName);
    want4.set(`${p.ip}/32`, { table: eni.table, veth });
    if (p.ip6) want6.set(`${p.ip6}/128`, { table: eni.table, veth });
  }
  await repairFamily(hostNs, 4, want4, rep);
  // IPv6 rules and routes of dual-stack pods; with no IPv6 pod, stale v6 ones still go.
  await repairFamily(hostNs, 6, want6, rep);
  return rep;
}

/** One address family's rules (prefs 512/2048) and cali* host routes against the wanted ones. */
async function repairFamily(
  hostNs: Netns,
  family: 4 | 6,
  want: Map<string, { table: number; veth: string }>,
  rep: RepairReport,
): Promise<void> {
  const hostLen = family === 4 ? '/32' : '/128';
  const rules = await rule.list(hostNs, family);
  const seen = new Set<string>();
  for (const r of rules) {
    let cidr: string | undefined;
    let ok: boolean;
    if (r.priority === PREF_TO_POD && r.dst) {
      cidr = r.dst;
      ok = want.has(cidr) && r.table === MAIN_TABLE;
    } else if (r.priority === PREF_FROM_POD && r.src) {
      cidr = r.src;
      ok = want.get(cidr)?.table === r.table;
    } else continue;
    if (ok) {
      seen.add(`${r.priority} ${cidr}`);
      continue;
    }
    await delListedRule(hostNs, family, r);
    rep.rulesRemoved.push(`${r.priority} ${cidr} table ${r.table}`);
  }
  for (const [cidr, w] of want) {
    if (!seen.has(`${PREF_TO_POD} ${cidr}`)) {
      await ignoreExists(rule.add(hostNs, { family, priority: PREF_TO_POD, dst: cidr, table: MAIN_TABLE }));
      rep.rulesAdded.push(`${PREF_TO_POD} to ${cidr}`);
    }
    if (!seen.has(`${PREF_FROM_POD} ${cidr}`)) {
      await ignoreExists(rule.add(hostNs, { family, priority: PREF_FROM_POD, src: cidr, table: w.table }));
      rep.rulesAdded.push(`${PREF_FROM_POD} from ${cidr} table ${w.table}`);
    }
  }
  // Host routes through cali* links.
  const links = await link.list(hostNs);
  const byIndex = new Map(links.map((l) => [l.index, l.name]));
  const routes = await route.list(hostNs, { family });
  const have = new Set<string>();
  for (const r of routes) {
    const dev = r.oif !== undefined ? byIndex.get(r.oif) : undefined;
    if (!dev?.startsWith('cali') || !r.dst.endsWith(hostLen)) continue;
    const w = want.get(r.dst);
    if (w && w.veth === dev) {
      have.add(r.dst);
      continue;
    }
    await ignoreNotFound(route.del(hostNs, { dst: r.dst, oif: r.oif! }));
    rep.routesRemoved.push(`${r.dst} dev ${dev}`);
  }
  for (const [cidr, w] of want) {
    if (have.has(cidr)) continue;
    const l = links.find((x) => x.name === w.veth);
    if (!l) continue; // the pod's veth is gone: only a new ADD can help
    await route.replace(hostNs, { dst: cidr, oif: l.index, ...(family === 4 ? { scope: SCOPE_LINK } : {}) });
    rep.routesAdded.push(`${cidr} dev ${w.veth}`);
  }
}

/**
 * CHECK: what setupPod made is still there. Returns the problems found
 * (empty when all is well), each naming the object.
 */
export async function checkPod(
  hostNs: Netns,
  podNs: Netns,
  p: { podNamespace: string; podName: string; ifName: string; ip: string; eniMac: string },
): Promise<string[]> {
  const problems: string[] = [];
  const name = hostVethName(p.podNamespace, p.podName);
  const host = await link.find(hostNs, name);
  if (!host) problems.push(`host veth ${name} is missing`);
  else if (!host.up) problems.push(`host veth ${name} is down`);
  let table: number | undefined;
  try {
    table = eniTable((await findEniLink(hostNs, p.eniMac)).index);
  } catch {
    problems.push(`no ENI link with MAC ${p.eniMac}`);
  }
  const cidr = `${p.ip}/32`;
  const rules = await rule.list(hostNs, 4);
  if (!rules.some((r) => r.priority === PREF_TO_POD && r.dst === cidr && r.table === MAIN_TABLE))
    problems.push(`rule "to ${cidr} lookup main pref ${PREF_TO_POD}" is missing`);
  if (table !== undefined && !rules.some((r) => r.priority === PREF_FROM_POD && r.src === cidr && r.table === table))
    problems.push(`rule "from ${cidr} lookup ${table} pref ${PREF_FROM_POD}" is missing`);
  if (host && !(await route.list(hostNs, { family: 4 })).some((r) => r.dst === cidr && r.oif === host.index))
    problems.push(`host route ${cidr} dev ${name} is missing`);
  await checkPodInterface(podNs, p.ifName, cidr, problems);
  return problems;
}

/**
 * CHECK of the pod end both veth datapaths (ENI multi-IP, VPC route) leave: the interface, its address and
 * its default route via POD_GATEWAY. Adds what is missing to `problems`; returns the interface if present.
 */
export async function checkPodInterface(podNs: Netns, ifName: string, cidr: string, problems: string[]): Promise<link.Link | undefined> {
  const pod = await link.find(podNs, ifName);
  if (!pod) {
    problems.push(`pod interface ${ifName} is missing`);
    return undefined;
  }
  if (!(await addr.list(podNs, { index: pod.index, family: 4 })).some((a) => a.address === cidr))
    problems.push(`pod address ${cidr} on ${ifName} is missing`);
  if (!(await route.list(podNs, { family: 4 })).some((r) => r.dst === 'default' && r.gw === POD_GATEWAY && r.oif === pod.index))
    problems.push(`pod default route via ${POD_GATEWAY} dev ${ifName} is missing`);
  return pod;
}
