/**
 * router's objects in the pod netns.
 *
 * Shared by every router NIC of the pod (created by the first, removed with
 * the last), in the overlay table T_o (eth0 -> 99), proto 158:
 *   - IPv4: `<host IP>/32 dev eth0 scope link src <eth0 IP>` and
 *     `<hijacked subnet> via <first host IP> dev eth0 onlink src <eth0 IP>`;
 *   - IPv6: the same destinations `via <host peer's link-local> dev eth0`
 *     (the kernel refuses a global on-link IPv6 gateway that main routes
 *     through another NIC, and a link-local next hop is what IPv6 wants);
 *   - rules `to <hijacked subnet>` and `to <host IP>/32` lookup T_o, priority 90;
 *   - when the chained NIC takes over main: eth0's own main routes moved to T_o
 *     and `from <eth0 IP> lookup T_o` (priority = T_o), so replies from the
 *     overlay address still leave through eth0;
 *   - PERMANENT neighbours for those next hops (IPv4 host IPs, the peer's IPv6
 *     link-local) -> the host peer's MAC on eth0 (unless sriov).
 * Per chained NIC: the routes prevResult lists for it (its default route) in
 * the table its traffic uses; when it keeps its routes apart (net2 -> table
 * 101), its routes moved there, `from <its IP>` and `to <its connected
 * subnet>` rules (priority = table number).
 */
import { isNotFoundError, ip, neigh, route, rule, type Netns, type Result, type UndoStack } from '@cnikit/netlib';
import { hijackSubnets, hostCidr, ignoreNotFound, migrateRoutes, moveLinkRoutes, type HostIPs } from '@cnikit/meta';
import type { RouterConfig } from './config';
import { fromPriority, HIJACK_PRIORITY, RTPROT_ROUTER } from './marks';
import { MAIN_TABLE } from './host';
import type { Family } from './overlay';

type Route = route.Route;
type Rule = rule.Rule;

const SCOPE_LINK = 253;
const RTPROT_KERNEL = 2;

export const familyIPs = (ips: string[], f: Family): string[] => ips.filter((i) => ip.familyOf(i) === f);
const hostsOf = (h: HostIPs, f: Family): string[] => (f === 4 ? h.v4 : h.v6);

/**
 * Routes of the overlay table towards the host and the hijacked subnets, for
 * the given families. IPv4: host IPs on-link, subnets via the first host IP
 * (on-link). IPv6: everything via the host peer's link-local address.
 */
export function sharedRoutes(
  cfg: RouterConfig,
  overlayIndex: number,
  overlayIPs: string[],
  hostIPs: HostIPs,
  families: Family[],
  table: number,
  v6Gateway?: string,
): Route[] {
  const out: Route[] = [];
  for (const f of families) {
    const src = familyIPs(overlayIPs, f)[0];
    const hosts = hostsOf(hostIPs, f);
    if (src === undefined || hosts.length === 0 || (f === 6 && v6Gateway === undefined)) continue;
    const seen = new Set<string>();
    for (const h of hosts) {
      const dst = hostCidr(h);
      if (seen.has(dst)) continue;
      seen.add(dst);
      if (f === 4) out.push({ dst, family: f, oif: overlayIndex, scope: SCOPE_LINK, table, src, protocol: RTPROT_ROUTER });
      else out.push({ dst, family: f, gw: v6Gateway!, oif: overlayIndex, table, src, protocol: RTPROT_ROUTER });
    }
    for (const subnet of hijackSubnets(cfg)) {
      if (ip.familyOf(subnet) !== f || seen.has(subnet)) continue;
      seen.add(subnet);
      if (f === 4)
        out.push({ dst: subnet, family: f, gw: hosts[0]!, oif: overlayIndex, onlink: true, table, src, protocol: RTPROT_ROUTER });
      else out.push({ dst: subnet, family: f, gw: v6Gateway!, oif: overlayIndex, table, src, protocol: RTPROT_ROUTER });
    }
  }
  return out;
}

/** The next hops the pod pins as PERMANENT neighbours on the overlay NIC: IPv4 host IPs, the peer's IPv6 link-local. */
export function podNextHops(hostIPs: HostIPs, families: Family[], v6Gateway?: string): string[] {
  const out: string[] = [];
  if (families.includes(4)) out.push(...hostIPs.v4);
  if (families.includes(6) && v6Gateway !== undefined) out.push(v6Gateway);
  return out;
}

/** `to <dst> lookup <overlay table>` rules for the hijacked subnets and the host IPs. */
export function sharedRules(cfg: RouterConfig, hostIPs: HostIPs, families: Family[], table: number): Rule[] {
  const out: Rule[] = [];
  for (const f of families) {
    const dsts = new Set<string>();
    for (const subnet of hijackSubnets(cfg)) if (ip.familyOf(subnet) === f) dsts.add(subnet);
    for (const h of hostsOf(hostIPs, f)) dsts.add(hostCidr(h));
    for (const dst of dsts) out.push({ family: f, dst, table, priority: HIJACK_PRIORITY });
  }
  return out;
}

/** Families for which the pod already has router's routes in the overlay table. */
export async function sharedFamilies(podNs: Netns, table: number): Promise<Family[]> {
  const have = new Set<Family>();
  for (const r of await route.list(podNs, { table })) if (r.protocol === RTPROT_ROUTER) have.add(r.family ?? ip.familyOf(r.dst));
  return ([4, 6] as const).filter((f) => have.has(f));
}

const isLinkLocal = (dst: string): boolean => dst.toLowerCase().startsWith('fe80:');

/**
 * Moves the main routes of `oif` of the given families to `table` (IPv6
 * link-local ones stay: NDP needs them; a multipath route is split, see
 * moveLinkRoutes), and adds `from <ip> lookup table` for `ips`. Each change is
 * pushed on `undo`.
 */
export async function moveToTable(
  ns: Netns,
  oif: number,
  ips: string[],
  families: Family[],
  table: number,
  undo: UndoStack,
): Promise<void> {
  await moveLinkRoutes(ns, oif, families, table, undo, (r) => r.protocol === RTPROT_ROUTER);
  for (const a of ips) {
    const r: Rule = { family: ip.familyOf(a), src: hostCidr(a), table, priority: fromPriority(table) };
    await rule.add(ns, r);
    undo.push(`remove rule from ${a} lookup ${table}`, () => rule.del(ns, r));
  }
}

/**
 * A chained NIC that keeps its routes apart: its routes move to its own table
 * with `from <ip>` rules (the shared migration of @cnikit/meta), and each of
 * its connected subnets gets `to <subnet> lookup <table>`, so unsourced
 * traffic to its own segment still leaves through it.
 */
export async function keepApart(ns: Netns, ifIndex: number, ips: string[], table: number, undo: UndoStack): Promise<void> {
  await migrateRoutes(ns, ifIndex, ips, table, undo);
  for (const r of await route.list(ns, { table })) {
    if (r.oif !== ifIndex || r.gw !== undefined || r.protocol !== RTPROT_KERNEL || r.dst === 'default' || isLinkLocal(r.dst)) continue;
    const to: Rule = { family: r.family ?? ip.familyOf(r.dst), dst: r.dst, table, priority: fromPriority(table) };
    await rule.add(ns, to);
    undo.push(`remove rule to ${r.dst} lookup ${table}`, () => rule.del(ns, to));
  }
}

const toKernelDst = (dst: string): string => (ip.parseCidr(dst).prefix === 0 ? 'default' : ip.networkOf(dst));

/**
 * The routes prevResult lists for the chained NIC, as they should be in
 * `table` (main when the NIC owns main, its own table when kept apart). The
 * main plugin may have skipped them (its IPAM's default route clashed with
 * the overlay's, which libcni-era plugins silently ignore); router adds the
 * missing ones once the overlay's routes are out of the way.
 */
export function prevRoutes(prev: Result, ifName: string, chainedIndex: number, families: Family[], table: number): Route[] {
  const out: Route[] = [];
  const gateways = new Map<Family, string>();
  const ifaces = prev.interfaces ?? [];
  for (const c of prev.ips ?? []) {
    const owner = c.interface === undefined ? undefined : ifaces[c.interface];
    if (owner !== undefined && owner.name !== ifName) continue;
    const f = ip.familyOf(c.address);
    if (c.gateway !== undefined && !gateways.has(f)) gateways.set(f, c.gateway);
  }
  for (const r of prev.routes ?? []) {
    const f = ip.familyOf(r.dst);
    const gw = r.gw ?? gateways.get(f);
    if (!families.includes(f) || gw === undefined) continue;
    out.push({ dst: toKernelDst(r.dst), family: f, gw, oif: chainedIndex, table, protocol: RTPROT_ROUTER });
  }
  return out;
}

/** Adds the prevResult routes missing from `table` (a route to the same destination counts as present). */
export async function addPrevRoutes(ns: Netns, wanted: Route[], undo: UndoStack): Promise<void> {
  for (const w of wanted) {
    const have = await route.list(ns, { table: w.table!, family: w.family! });
    if (have.some((r) => r.dst === w.dst)) continue;
    await route.add(ns, w);
    undo.push(`delete route ${w.dst} table ${w.table}`, () => ignoreNotFound(route.del(ns, w)));
  }
}

/** Deletes router's routes through `oif` in `table`. */
export async function dropOwnRoutes(ns: Netns, oif: number, table: number): Promise<void> {
  for (const r of await route.list(ns, { table, oif })) {
    if (r.protocol === RTPROT_ROUTER)
      await ignoreNotFound(route.del(ns, { dst: r.dst, family: r.family, table, oif, protocol: RTPROT_ROUTER }));
  }
}

/** Rules of `table` at `priority`, both families. */
export async function rulesAt(ns: Netns, table: number, priority: number): Promise<Rule[]> {
  return (await rule.list(ns)).filter((r) => r.table === table && r.priority === priority);
}

/** Exact-match delete of a listed rule (all its selectors), absent is fine. */
async function delRule(ns: Netns, r: Rule): Promise<void> {
  const m: Rule = { family: r.family, table: r.table };
  if (r.priority !== undefined) m.priority = r.priority;
  if (r.src !== undefined) m.src = r.src;
  if (r.dst !== undefined) m.dst = r.dst;
  await ignoreNotFound(rule.del(ns, m));
}

/**
 * Empties `table` of what router put there: its own routes are deleted, the
 * routes it moved there go back to main (those of a link that is gone are
 * dropped), the rules at `priorities` pointing at it are deleted. Returns the
 * next hops its routes used (IPv4 host IPs, IPv6 link-local gateways), for
 * neighbour cleanup.
 */
export async function emptyTable(
  ns: Netns,
  table: number,
  priorities: number[],
  log: (m: string, f?: Record<string, unknown>) => void,
): Promise<string[]> {
  for (const p of priorities) for (const r of await rulesAt(ns, table, p)) await delRule(ns, r);
  const hostIPs: string[] = [];
  // Routes without a gateway first: a gateway route needs its gateway reachable when it goes back to main.
  const routes = (await route.list(ns, { table })).sort((a, b) => Number(a.gw !== undefined) - Number(b.gw !== undefined));
  for (const r of routes) {
    if (r.protocol === RTPROT_ROUTER) {
      if (r.gw === undefined && r.dst.endsWith('/32')) hostIPs.push(r.dst.split('/')[0]!);
      if (r.gw !== undefined && isLinkLocal(r.gw) && !hostIPs.includes(r.gw)) hostIPs.push(r.gw);
      await ignoreNotFound(route.del(ns, { dst: r.dst, family: r.family, table, oif: r.oif, protocol: RTPROT_ROUTER }));
      continue;
    }
    try {
      await route.replace(ns, { ...r, table: MAIN_TABLE });
      log('route back to main', { dst: r.dst, from: table });
    } catch (e) {
      if (!isNotFoundError(e)) throw e;
    }
    await ignoreNotFound(route.del(ns, { ...r, table }));
  }
  return hostIPs;
}

/** Deletes PERMANENT neighbours for `ips` on `index`. */
export async function dropNeighbours(ns: Netns, index: number, ips: string[]): Promise<void> {
  if (ips.length === 0) return;
  for (const n of await neigh.list(ns, { index })) {
    if (ips.includes(n.ip) && n.state === neigh.NUD.PERMANENT) await ignoreNotFound(neigh.del(ns, { index, ip: n.ip }));
  }
}
