/**
 * router's objects in the host netns, per attachment:
 *   - `<chained IP>/32 dev <overlay peer> scope link proto 158 metric <key>`,
 *     in host_rule_table when the IP sits inside one of the host's own subnets
 *     (the macvlan parent's), else in main;
 *   - a PERMANENT neighbour <chained IP> -> the pod overlay NIC's MAC on the
 *     peer (unless sriov);
 * and, shared by every attachment, `pref 1000 lookup <host_rule_table>` per
 * family while that table holds routes.
 */
import { addr, ip, isExistsError, neigh, route, rule, type Netns } from '@cnikit/netlib';
import { familyOf, hostCidr, ignoreNotFound } from '@cnikit/meta';
import { HOST_RULE_PRIORITY, RTPROT_ROUTER } from './marks';

type Route = route.Route;

export const MAIN_TABLE = 254;
const SCOPE_LINK = 253;

/** Networks of the host's global addresses ("10.6.0.0/16"). */
export async function hostSubnets(hostNs: Netns): Promise<string[]> {
  return (await addr.list(hostNs)).filter((a) => a.scope === 0).map((a) => ip.networkOf(a.address));
}

/** The host route of one chained IP. */
export function hostRoute(chainedIP: string, peerIndex: number, key: number, subnets: string[], hostRuleTable: number): Route {
  const family = familyOf(chainedIP);
  const inHostSubnet = subnets.some((s) => ip.familyOf(s) === family && ip.contains(s, chainedIP));
  return {
    dst: hostCidr(chainedIP),
    family,
    oif: peerIndex,
    scope: SCOPE_LINK,
    table: inHostSubnet ? hostRuleTable : MAIN_TABLE,
    protocol: RTPROT_ROUTER,
    metric: key,
  };
}

/** Every route router added on the host, in any table. */
export async function ownedHostRoutes(hostNs: Netns): Promise<Route[]> {
  return route.list(hostNs, { table: 0, protocol: RTPROT_ROUTER });
}

const isHostRule = (r: { priority?: number; table: number; src?: string; dst?: string }, table: number): boolean =>
  r.priority === HOST_RULE_PRIORITY && r.table === table && r.src === undefined && r.dst === undefined;

export async function hasHostRule(hostNs: Netns, family: 4 | 6, table: number): Promise<boolean> {
  return (await rule.list(hostNs, family)).some((r) => isHostRule(r, table));
}

/**
 * Adds `pref 1000 lookup <table>` for `family` unless it is there. Called
 * after the caller added its route to the table. Returns whether it added it.
 *
 * No lock: ADDs and DELs of different attachments run concurrently, and they
 * agree through an order of operations instead. ADD adds its route first, then
 * this; releaseHostRules deletes the rule only if the table looked empty, then
 * looks again and puts the rule back if a route arrived meanwhile. Whichever
 * acts last sees the other's route, so once both are done the rule exists
 * exactly when the table holds routes. (The runtime never runs ADD and DEL of
 * one attachment at once.)
 */
export async function ensureHostRule(hostNs: Netns, family: 4 | 6, table: number): Promise<boolean> {
  if (await hasHostRule(hostNs, family, table)) return false;
  try {
    await rule.add(hostNs, { family, priority: HOST_RULE_PRIORITY, table });
  } catch (e) {
    if (isExistsError(e)) return false; // a concurrent ADD was first
    throw e;
  }
  return true;
}

/** Removes the host rule of each (family, table) whose table no longer holds any route. Returns what it removed. */
export async function releaseHostRules(hostNs: Netns, wanted: { family: 4 | 6; table: number }[]): Promise<string[]> {
  const seen = new Set<string>();
  const todo = wanted.filter((w) => w.table !== MAIN_TABLE && !seen.has(`${w.family}/${w.table}`) && seen.add(`${w.family}/${w.table}`));
  const removed: string[] = [];
  for (const { family, table } of todo) {
    if ((await route.list(hostNs, { family, table })).length > 0) continue;
    if (!(await hasHostRule(hostNs, family, table))) continue;
    await ignoreNotFound(rule.del(hostNs, { family, priority: HOST_RULE_PRIORITY, table }));
    // An ADD may have added its route between our look and the delete, and seen the rule still there.
    if ((await route.list(hostNs, { family, table })).length > 0) await ensureHostRule(hostNs, family, table);
    else removed.push(`ipv${family} rule pref ${HOST_RULE_PRIORITY} lookup ${table}`);
  }
  return removed;
}

/**
 * Deletes host routes of router (and the neighbour entry each one implied,
 * once no other router route leads to that IP), then the host rules whose
 * table became empty. `routes` come from ownedHostRoutes(). Absent objects
 * are fine; other failures are collected, not thrown, so one bad object does
 * not keep the rest alive.
 */
export async function removeHostRoutes(hostNs: Netns, routes: Route[]): Promise<{ removed: string[]; errors: string[] }> {
  const removed: string[] = [];
  const errors: string[] = [];
  for (const r of routes) {
    try {
      await ignoreNotFound(
        route.del(hostNs, { dst: r.dst, family: r.family, oif: r.oif, table: r.table, metric: r.metric, protocol: RTPROT_ROUTER }),
      );
      removed.push(`route ${r.dst} table ${r.table} metric ${r.metric}`);
    } catch (e) {
      errors.push(`route ${r.dst} table ${r.table}: ${e instanceof Error ? e.message : String(e)}`);
    }
  }
  const left = await ownedHostRoutes(hostNs);
  for (const r of routes) {
    if (r.oif === undefined) continue;
    const plain = r.dst.split('/')[0]!;
    if (left.some((l) => l.dst === r.dst)) continue; // another attachment (a new owner of the IP) still uses it
    try {
      const n = (await neigh.list(hostNs, { index: r.oif, family: familyOf(plain) })).find((x) => x.ip === plain);
      if (n !== undefined && n.state === neigh.NUD.PERMANENT) {
        await ignoreNotFound(neigh.del(hostNs, { index: r.oif, ip: plain }));
        removed.push(`neighbour ${plain}`);
      }
    } catch (e) {
      errors.push(`neighbour ${plain}: ${e instanceof Error ? e.message : String(e)}`);
    }
  }
  try {
    removed.push(
      ...(await releaseHostRules(
        hostNs,
        routes.map((r) => ({ family: r.family ?? familyOf(r.dst), table: r.table ?? MAIN_TABLE })),
      )),
    );
  } catch (e) {
    errors.push(`host rule: ${e instanceof Error ? e.message : String(e)}`);
  }
  return { removed, errors };
}
