/**
 * veth ADD: give a macvlan/SR-IOV pod a path to its host and to Services.
 *
 *   1. a veth pair: veth0 in the pod, veth<containerID[:11]> on the host
 *      (created once per pod; later chained interfaces reuse it)
 *   2. permanent neighbours both ways, so no ARP/NDP crosses the pair
 *   3. pod routes: host IPs and the hijacked subnets via veth0;
 *      host routes: each pod IP via the host end
 *   4. for secondary interfaces (net1, net2, ...): their routes move to
 *      table 100+N-1 with `from <ip>` rules (migrate_route)
 *   5. rp_filter and IPv6 sysctls
 * Every kernel change is pushed on an undo stack; a failure unwinds it.
 */
import {
  CniError,
  CniCode,
  hostNetns,
  isExistsError,
  link,
  neigh,
  route,
  sysctl,
  UndoStack,
  ip,
  type Netns,
  type Result,
} from '@cnikit/netlib';
import {
  discoverHostIPs,
  familyOf,
  hijackSubnets,
  hostCidr,
  migrateRoutes,
  requirePodIPs,
  tableForInterface,
  type HostIPs,
} from '@cnikit/meta';
import type { VethConfig } from './config';
import { checkIpConflicts } from './ip-conflict';
import { hostVethAlias, hostVethMac, hostVethName, POD_VETH } from './names';

export const MAIN_TABLE = 254;
const SCOPE_LINK = 253;
const VETH_MTU = 1500;

export interface AddRequest {
  containerId: string;
  ifName: string;
  netnsPath: string;
  podNs: Netns;
  log: (msg: string, fields?: Record<string, unknown>) => void;
}

/**
 * Tables that get the veth routes of an interface, and whether its own routes migrate.
 *
 * migrate_route -1 follows the interface name order (eth0 < net1 < net2), not the order the
 * runtime happens to call us in (podman sets up a container's networks in no fixed order):
 * eth0 keeps main, every netN moves to its own table. The interface that keeps main (re)writes
 * main's veth routes with its own address as source; an interface that migrates also writes main
 * when it created the pair, so the pod reaches its host before eth0's chain has run.
 * With migrate_route 0 a later interface adds nothing to main (the first one's routes stay).
 */
export function planTables(cfg: VethConfig, ifName: string, first: boolean): { tables: number[]; migrateTo?: number } {
  const migrate = cfg.migrateRoute === 1 || (cfg.migrateRoute === -1 && tableForInterface(ifName) !== tableForInterface('eth0'));
  if (!migrate) return { tables: first || cfg.migrateRoute === -1 ? [MAIN_TABLE] : [] };
  const t = tableForInterface(ifName);
  return { tables: first ? [MAIN_TABLE, t] : [t], migrateTo: t };
}

/**
 * The next hop of hijacked subnets for a family: the first host IP for IPv4; for IPv6 the host
 * end's EUI-64 link-local address. A global IPv6 next hop inside the chained interface's subnet is
 * refused in a non-main table ("Nexthop has invalid gateway"), a link-local one on veth0 never is;
 * a permanent neighbour pins it to the host end's MAC, so the host need not even own it.
 */
export function nextHop(family: 4 | 6, hostIPs: { v4: string[]; v6: string[] }, hostMac: string): string | undefined {
  if (family === 4) return hostIPs.v4[0];
  return hostIPs.v6.length > 0 ? ip.linkLocalFromMac(hostMac) : undefined;
}

/** The pod routes for one table: host IPs on-link through veth0, hijacked subnets via the next hop. */
export function podRoutes(
  cfg: VethConfig,
  podVethIndex: number,
  hostIPs: { v4: string[]; v6: string[] },
  hostMac: string,
  podIPs: string[],
  table: number,
): route.Route[] {
  const out: route.Route[] = [];
  for (const family of [4, 6] as const) {
    const hosts = family === 4 ? hostIPs.v4 : hostIPs.v6;
    const src = podIPs.find((p) => familyOf(p) === family);
    const gw = nextHop(family, hostIPs, hostMac);
    if (src === undefined || gw === undefined) continue;
    for (const h of hosts) {
      out.push({ dst: hostCidr(h), family, oif: podVethIndex, scope: SCOPE_LINK, table, src });
    }
    for (const subnet of hijackSubnets(cfg)) {
      if (ip.familyOf(subnet) !== family) continue;
      out.push({ dst: subnet, family, gw, oif: podVethIndex, onlink: family === 4, table, src });
    }
  }
  return out;
}

async function createPair(hostNs: Netns, req: AddRequest, cfg: VethConfig, undo: UndoStack): Promise<{ host: link.Link; pod: link.Link }> {
  const name = hostVethName(req.containerId);
  const alias = hostVethAlias(cfg.netName, req.containerId);
  const spec = { name, peerName: POD_VETH, peerNs: req.podNs, mtu: VETH_MTU, mac: hostVethMac(req.containerId) };
  let pair;
  try {
    pair = await link.addVeth(hostNs, spec);
  } catch (e) {
    // A host end left by an earlier, interrupted ADD of this same container: replace it.
    const stale = isExistsError(e) ? await link.find(hostNs, name) : undefined;
    if (stale === undefined || stale.alias !== alias) throw e;
    req.log('replacing stale host veth', { link: name });
    await link.del(hostNs, stale.index);
    pair = await link.addVeth(hostNs, spec);
  }
  undo.push(`delete host veth ${name}`, () => link.del(hostNs, pair.link.index));
  await link.setAlias(hostNs, pair.link.index, alias);
  return { host: pair.link, pod: pair.peer };
}

function setSysctls(hostNs: Netns, podNs: Netns, cfg: VethConfig, host: link.Link, pod: link.Link, ifName: string, podIPs: string[]): void {
  const hasV4 = podIPs.some((p) => familyOf(p) === 4);
  const hasV6 = podIPs.some((p) => familyOf(p) === 6);
  if (hasV6) {
    // veth0 is created with IPv6 disabled when the pod's default says so; neighbours and routes need it on.
    sysctl.set(podNs, 'net/ipv6/conf/all/disable_ipv6', '0');
    sysctl.set(podNs, `net/ipv6/conf/${POD_VETH}/disable_ipv6`, '0');
    sysctl.set(hostNs, `net/ipv6/conf/${host.name}/disable_ipv6`, '0');
  }
  if (hasV4) {
    const v = String(cfg.rpFilter.value);
    sysctl.set(podNs, 'net/ipv4/conf/all/rp_filter', v);
    sysctl.set(podNs, `net/ipv4/conf/${POD_VETH}/rp_filter`, v);
    sysctl.set(podNs, `net/ipv4/conf/${ifName}/rp_filter`, v);
    if (cfg.rpFilter.setHost) {
      sysctl.set(hostNs, 'net/ipv4/conf/all/rp_filter', v);
      sysctl.set(hostNs, `net/ipv4/conf/${host.name}/rp_filter`, v);
    }
  }
  void pod;
}

/** Removes neighbour entries for the pod IPs that point elsewhere on the host (a previous owner of the IP). */
async function dropStaleNeighbours(hostNs: Netns, hostIndex: number, podIPs: string[], undo: UndoStack): Promise<void> {
  const wanted = new Set(podIPs);
  for (const n of await neigh.list(hostNs)) {
    if (!wanted.has(n.ip) || n.index === hostIndex) continue;
    await neigh.del(hostNs, { index: n.index, ip: n.ip }).catch(() => undefined);
    if (n.mac !== undefined && n.state === neigh.NUD.PERMANENT) {
      const { index, ip: nip, mac } = n;
      undo.push(`restore neighbour ${nip}`, () => neigh.replace(hostNs, { index, ip: nip, mac, state: neigh.NUD.PERMANENT }));
    }
  }
}

/** The interface the previous plugin made in the pod, which veth is chained after. */
async function chainedInterface(req: AddRequest): Promise<link.Link> {
  const chained = await link.find(req.podNs, req.ifName);
  if (chained === undefined) {
    throw new CniError(
      CniCode.InvalidNetworkConfig,
      `interface ${req.ifName} not found in the pod`,
      `netns ${req.netnsPath}; the previous plugin should have created it`,
    );
  }
  return chained;
}

/** mac_prefix: the chained interface's MAC derived from its IPv4 address (restored on rollback). */
async function applyMacPrefix(
  cfg: VethConfig,
  req: AddRequest,
  chained: link.Link,
  podIPs: string[],
  result: Result,
  undo: UndoStack,
): Promise<void> {
  if (cfg.macPrefix === undefined) return;
  const v4 = podIPs.find((p) => familyOf(p) === 4);
  if (v4 === undefined)
    throw new CniError(
      CniCode.InvalidNetworkConfig,
      'mac_prefix needs an IPv4 address',
      `interface ${req.ifName} has only ${podIPs.join(', ')}`,
    );
  const mac = ip.ipToMacV4(cfg.macPrefix, v4);
  await link.setMac(req.podNs, chained.index, mac);
  undo.push(`restore MAC of ${req.ifName}`, () => link.setMac(req.podNs, chained.index, chained.mac));
  for (const i of result.interfaces ?? []) if (i.name === req.ifName && i.sandbox) i.mac = mac;
}

/** The pod's veth pair: made by the first chained interface, reused by the next ones. */
async function vethPair(
  hostNs: Netns,
  req: AddRequest,
  cfg: VethConfig,
  undo: UndoStack,
): Promise<{ host: link.Link; pod: link.Link; first: boolean }> {
  const existing = await link.find(req.podNs, POD_VETH);
  if (existing === undefined) return { ...(await createPair(hostNs, req, cfg, undo)), first: true };
  const host = await link.find(hostNs, hostVethName(req.containerId));
  if (host === undefined) {
    throw new CniError(
      CniCode.Internal,
      `pod has ${POD_VETH} but host end ${hostVethName(req.containerId)} is missing`,
      'delete and re-add the pod network',
    );
  }
  return { host, pod: existing, first: false };
}

/** Neighbours: the pod resolves host IPs to the host end, the host resolves pod IPs to veth0. */
async function publishNeighbours(
  hostNs: Netns,
  req: AddRequest,
  pair: { host: link.Link; pod: link.Link },
  podIPs: string[],
  hostIPs: HostIPs,
  undo: UndoStack,
): Promise<void> {
  const { host, pod } = pair;
  await dropStaleNeighbours(hostNs, host.index, podIPs, undo);
  for (const p of podIPs) {
    await neigh.replace(hostNs, { index: host.index, ip: p, mac: pod.mac, state: neigh.NUD.PERMANENT });
    undo.push(`delete host neighbour ${p}`, () => neigh.del(hostNs, { index: host.index, ip: p }));
  }
  const v6Hop = nextHop(6, hostIPs, host.mac);
  for (const h of [...hostIPs.v4, ...hostIPs.v6, ...(v6Hop ? [v6Hop] : [])]) {
    await neigh.replace(req.podNs, { index: pod.index, ip: h, mac: host.mac, state: neigh.NUD.PERMANENT });
  }
}

/** Routes: on the host each pod IP through the host end; in the pod host IPs and hijacked subnets through veth0. */
async function addRoutes(
  hostNs: Netns,
  cfg: VethConfig,
  req: AddRequest,
  ctx: { chained: link.Link; host: link.Link; pod: link.Link; first: boolean },
  podIPs: string[],
  hostIPs: HostIPs,
  undo: UndoStack,
): Promise<void> {
  for (const p of podIPs) {
    const r: route.Route = { dst: hostCidr(p), family: familyOf(p), oif: ctx.host.index, scope: SCOPE_LINK };
    await route.replace(hostNs, r);
    undo.push(`delete host route ${r.dst}`, () => route.del(hostNs, r));
  }
  const plan = planTables(cfg, req.ifName, ctx.first);
  if (plan.migrateTo !== undefined) await migrateRoutes(req.podNs, ctx.chained.index, podIPs, plan.migrateTo, undo);
  for (const table of plan.tables) {
    for (const r of podRoutes(cfg, ctx.pod.index, hostIPs, ctx.host.mac, podIPs, table)) {
      await route.replace(req.podNs, r);
      undo.push(`delete pod route ${r.dst} table ${table}`, () => route.del(req.podNs, r));
    }
  }
}

/** The previous result with veth's two ends added (once: a second chained interface shares the pair). */
function withPairInterfaces(result: Result, host: link.Link, pod: link.Link, netnsPath: string): Result {
  const interfaces = result.interfaces!;
  if (!interfaces.some((i) => i.name === host.name && !i.sandbox)) interfaces.push({ name: host.name, mac: host.mac });
  if (!interfaces.some((i) => i.name === POD_VETH && i.sandbox)) interfaces.push({ name: POD_VETH, mac: pod.mac, sandbox: netnsPath });
  return result;
}

export async function addVeth(cfg: VethConfig, req: AddRequest): Promise<Result> {
  const prev = cfg.prevResult!;
  const hostNs = hostNetns();
  const podIPs = requirePodIPs(prev, req.ifName);
  const chained = await chainedInterface(req);
  await checkIpConflicts(req.podNs, chained.index, req.ifName, podIPs, cfg.ipConflict);
  const hostIPs = await discoverHostIPs(hostNs, podIPs);
  req.log('host IPs', { hostIPs });

  const undo = new UndoStack();
  try {
    const result: Result = { ...structuredClone(prev), cniVersion: cfg.cniVersion };
    result.interfaces = result.interfaces ?? [];
    await applyMacPrefix(cfg, req, chained, podIPs, result, undo);
    const { host, pod, first } = await vethPair(hostNs, req, cfg, undo);
    setSysctls(hostNs, req.podNs, cfg, host, pod, req.ifName, podIPs);
    if (first) {
      await link.setUp(hostNs, host.index);
      await link.setUp(req.podNs, pod.index);
    }
    await publishNeighbours(hostNs, req, { host, pod }, podIPs, hostIPs, undo);
    await addRoutes(hostNs, cfg, req, { chained, host, pod, first }, podIPs, hostIPs, undo);
    undo.commit();
    return withPairInterfaces(result, host, pod, req.netnsPath);
  } catch (e) {
    const failed = await undo.unwind();
    if (failed.length > 0) req.log('rollback incomplete', { failed });
    throw e;
  }
}
