/**
 * Route migration for a pod's secondary interfaces: the interface's routes
 * move from the main table to its own table, and `from <its IPs>` rules send
 * traffic sourced from those IPs there. Replies leave through the interface
 * they belong to while main keeps the first interface's default route.
 */
import { route, rule, type Netns, type UndoStack } from '@cnikit/netlib';
import { hostCidr } from './pod-ips';

/**
 * Table of an interface, 100+N-1 for the trailing number N of its name:
 * net1 -> 100, net2 -> 101; eth0 (and a name without a number) -> 99, so a
 * first interface that migrates (migrate_route 1) never shares net1's table.
 */
export function tableForInterface(ifName: string): number {
  const m = /(\d+)$/.exec(ifName);
  const n = m ? Number(m[1]) : 0;
  return 100 + n - 1;
}

/** Priority of the `from <ip>` rules of a table: the table number, so each interface's rules are told apart. */
export function rulePriorityForTable(table: number): number {
  return table;
}

function isLinkLocalRoute(dst: string): boolean {
  return dst.toLowerCase().startsWith('fe80:');
}

type Route = route.Route;

/** Whether `r` leads through link `oif`: as its only next hop or as one of a multipath route's. */
export function leadsThrough(r: Route, oif: number): boolean {
  return r.oif === oif || (r.nexthops ?? []).some((n) => n.oif === oif);
}

/** `r` with only the next hops `nhs`: a plain route for one, a multipath route for several. */
function withNexthops(r: Route, nhs: route.Nexthop[]): Route {
  const { nexthops: _all, gw: _gw, oif: _oif, onlink: _onlink, ...base } = r;
  if (nhs.length > 1) return { ...base, nexthops: nhs };
  const [n] = nhs;
  const out: Route = { ...base, oif: n!.oif };
  if (n!.gw !== undefined) out.gw = n!.gw;
  if (n!.onlink) out.onlink = true;
  return out;
}

/**
 * Moves the main-table routes of `families` that lead through `oif` to `table`, except those
 * `skip` names. A multipath route (an IPv6 ECMP default made of the overlay's and the secondary
 * NIC's defaults, which the reference plugins' ConfigureIface creates) is split: its next hops
 * through `oif` move, the others stay in main as their own route. Each change is pushed on `undo`.
 */
export async function moveLinkRoutes(
  ns: Netns,
  oif: number,
  families: readonly (4 | 6)[],
  table: number,
  undo: UndoStack,
  skip: (r: Route) => boolean = () => false,
): Promise<void> {
  for (const family of families) {
    for (const r of await route.list(ns, { family })) {
      if (!leadsThrough(r, oif) || isLinkLocalRoute(r.dst) || skip(r)) continue;
      const mine = r.nexthops?.filter((n) => n.oif === oif);
      const rest = r.nexthops?.filter((n) => n.oif !== oif) ?? [];
      const moved = { ...(mine ? withNexthops(r, mine) : r), table };
      await route.replace(ns, moved);
      undo.push(`remove moved route ${r.dst} table ${table}`, () => route.del(ns, moved));
      if (rest.length > 0) await route.replace(ns, withNexthops(r, rest));
      else await route.del(ns, r);
      undo.push(`restore route ${r.dst}`, () => route.replace(ns, r));
    }
  }
}

/**
 * Moves every main-table route of `ifIndex` (IPv6 link-local excepted: NDP needs it) to `table`
 * and adds `from <ip> lookup table` for each of `ips`. Each change is pushed on `undo`.
 */
export async function migrateRoutes(ns: Netns, ifIndex: number, ips: string[], table: number, undo: UndoStack): Promise<void> {
  await moveLinkRoutes(ns, ifIndex, [4, 6], table, undo);
  const priority = rulePriorityForTable(table);
  for (const ipAddr of ips) {
    const r = { family: ipAddr.includes(':') ? (6 as const) : (4 as const), src: hostCidr(ipAddr), table, priority };
    await rule.add(ns, r);
    undo.push(`remove rule from ${ipAddr} table ${table}`, () => rule.del(ns, r));
  }
}
