/**
 * router CHECK: verifies every object ADD created for the attachment and
 * reports all that are missing or wrong in one error (details list them).
 * Objects added by later plugins are tolerated. Host IPs are re-discovered:
 * the primary one (the host's source address towards the overlay NIC) must
 * be pinned; the others may have come and gone.
 */
import { CniError, neigh, route, rule, type Netns } from '@cnikit/netlib';
import { familyOf, hostCidr, leadsThrough } from '@cnikit/meta';
import type { RouterConfig } from './config';
import { hasHostRule, hostRoute, hostSubnets, MAIN_TABLE, ownedHostRoutes } from './host';
import { attachmentKey, fromPriority, ownTable, RTPROT_ROUTER } from './marks';
import { familyIPs, podNextHops, prevRoutes, rulesAt, sharedRoutes, sharedRules } from './pod';
import { lookScene } from './setup';

type Route = route.Route;

/** Code of a failed CHECK: plugin-specific range (the same as veth's). */
export const CODE_CHECK_FAILED = 102;

const sameRoute = (have: Route, want: Route): boolean =>
  have.dst === want.dst && have.oif === want.oif && (want.gw === undefined || have.gw === want.gw);

type Scene = Awaited<ReturnType<typeof lookScene>>;

/** Host: a route per chained IP (with the host rule when it lives in host_rule_table) and a neighbour. */
async function hostProblems(cfg: RouterConfig, hostNs: Netns, s: Scene, key: number, ips: string[]): Promise<string[]> {
  const problems: string[] = [];
  const subnets = await hostSubnets(hostNs);
  const owned = await ownedHostRoutes(hostNs);
  for (const i of ips) {
    const want = hostRoute(i, s.peer.link.index, key, subnets, cfg.hostRuleTable);
    if (!owned.some((r) => r.dst === want.dst && r.oif === want.oif && r.metric === key && r.table === want.table)) {
      problems.push(`host route ${want.dst} dev ${s.peer.link.name} table ${want.table} missing`);
    }
    if (want.table !== MAIN_TABLE && !(await hasHostRule(hostNs, want.family!, want.table!))) {
      problems.push(`host rule ipv${want.family} pref 1000 lookup ${want.table} missing`);
    }
  }
  if (!cfg.sriov) {
    const hn = await neigh.list(hostNs, { index: s.peer.link.index });
    for (const i of ips) {
      const n = hn.find((x) => x.ip === i);
      if (n === undefined || n.mac !== s.overlay.link.mac || n.state !== neigh.NUD.PERMANENT)
        problems.push(`host neighbour ${i} -> ${s.overlay.link.mac} on ${s.peer.link.name} missing`);
    }
  }
  return problems;
}

/** Pod, shared: routes and rules towards the primary host IP and the hijacked subnets, its neighbour. */
async function sharedPodProblems(cfg: RouterConfig, podNs: Netns, s: Scene): Promise<string[]> {
  const problems: string[] = [];
  const primary = { v4: s.hostIPs.v4.slice(0, 1), v6: s.hostIPs.v6.slice(0, 1) };
  const tableRoutes = await route.list(podNs, { table: s.table });
  for (const want of sharedRoutes(cfg, s.overlay.link.index, s.overlay.ips, primary, s.families, s.table, s.peer.linkLocal)) {
    // eth0's own route to the same destination (moved there with it) is just as good.
    if (!tableRoutes.some((r) => (r.protocol === RTPROT_ROUTER ? sameRoute(r, want) : r.dst === want.dst && r.oif === want.oif))) {
      problems.push(`pod route ${want.dst}${want.gw ? ` via ${want.gw}` : ''} dev ${s.overlay.link.name} table ${s.table} missing`);
    }
  }
  const podRules = await rule.list(podNs);
  for (const want of sharedRules(cfg, primary, s.families, s.table)) {
    if (!podRules.some((r) => r.family === want.family && r.dst === want.dst && r.table === want.table && r.priority === want.priority)) {
      problems.push(`pod rule to ${want.dst} lookup ${want.table} missing`);
    }
  }
  if (!cfg.sriov) {
    const pn = await neigh.list(podNs, { index: s.overlay.link.index });
    for (const h of podNextHops(primary, s.families, s.peer.linkLocal)) {
      const n = pn.find((x) => x.ip === h);
      if (n === undefined || n.mac !== s.peer.link.mac || n.state !== neigh.NUD.PERMANENT)
        problems.push(`pod neighbour ${h} -> ${s.peer.link.mac} on ${s.overlay.link.name} missing`);
    }
  }
  return problems;
}

/** Pod, per NIC: kept apart in its own table, or owner of main (then eth0's routes left main). */
async function nicPodProblems(cfg: RouterConfig, podNs: Netns, s: Scene, ifName: string, ips: string[]): Promise<string[]> {
  const problems: string[] = [];
  const tOwn = ownTable(ifName);
  const ownRules = await rulesAt(podNs, tOwn, fromPriority(tOwn));
  const apart = ownRules.some((r) => r.src !== undefined && ips.some((i) => r.src === hostCidr(i)));
  if (apart || cfg.migrateRoute === 1) {
    if (cfg.migrateRoute === 0) problems.push(`${ifName}'s routes are in table ${tOwn} but migrate_route is 0`);
    for (const i of s.chainedIPs) {
      if (!ownRules.some((r) => r.src === hostCidr(i))) problems.push(`pod rule from ${i} lookup ${tOwn} missing`);
    }
  } else if (cfg.migrateRoute === -1) {
    problems.push(...(await mainLeftProblems(podNs, s)));
  }
  const nicTable = apart || cfg.migrateRoute === 1 ? tOwn : cfg.migrateRoute === -1 ? MAIN_TABLE : undefined;
  if (nicTable !== undefined) {
    for (const w of prevRoutes(cfg.prevResult!, ifName, s.chainedIndex, s.families, nicTable)) {
      const have = await route.list(podNs, { table: nicTable, family: w.family! });
      if (!have.some((r) => r.dst === w.dst)) problems.push(`pod route ${w.dst} via ${w.gw} dev ${ifName} table ${nicTable} missing`);
    }
  }
  return problems;
}

/** migrate_route -1 with this NIC owning main: eth0's addresses ruled to the shared table, its default gone from main. */
async function mainLeftProblems(podNs: Netns, s: Scene): Promise<string[]> {
  const problems: string[] = [];
  const moved = await rulesAt(podNs, s.table, fromPriority(s.table));
  for (const o of s.families.flatMap((f) => familyIPs(s.overlay.ips, f))) {
    if (!moved.some((r) => r.src === hostCidr(o))) problems.push(`pod rule from ${o} lookup ${s.table} missing`);
  }
  for (const f of s.families) {
    const main = await route.list(podNs, { family: f });
    if (main.some((r) => r.dst === 'default' && leadsThrough(r, s.overlay.link.index)))
      problems.push(`${s.overlay.link.name}'s IPv${f} default route is still in main`);
  }
  return problems;
}

export async function checkRouter(
  cfg: RouterConfig,
  hostNs: Netns,
  podNs: Netns,
  containerId: string,
  ifName: string,
  netnsPath: string,
): Promise<void> {
  const s = await lookScene(cfg, hostNs, podNs, ifName, netnsPath);
  const ips = s.chainedIPs.filter((i) => s.families.includes(familyOf(i)));
  const problems = [
    ...(await hostProblems(cfg, hostNs, s, attachmentKey(cfg.netName, containerId, ifName), ips)),
    ...(await sharedPodProblems(cfg, podNs, s)),
    ...(await nicPodProblems(cfg, podNs, s, ifName, ips)),
  ];
  if (problems.length > 0) throw new CniError(CODE_CHECK_FAILED, 'router check failed', problems.join('; '));
}
