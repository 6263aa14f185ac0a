/**
 * router ADD: a pod whose first NIC comes from an overlay CNI gets a chained
 * NIC (net1, net2: macvlan, SR-IOV). East-west traffic (the host, the overlay,
 * Services, additional subnets) keeps leaving through the overlay NIC;
 * north-south traffic leaves through the chained NIC.
 *
 *   1. host: `<chained IP>/32 dev <overlay peer>` (host_rule_table when the IP
 *      is in a host subnet, with `pref 1000 lookup <host_rule_table>`; else
 *      main) and a PERMANENT neighbour <chained IP> -> eth0's MAC
 *   2. pod, once per pod (per family): routes to the host IPs and the hijacked
 *      subnets via eth0 in the overlay table, `to <them>` rules, PERMANENT
 *      neighbours for their next hops -> the peer's MAC on eth0 (see pod.ts)
 *   3. pod, per chained NIC (migrate_route): the first one takes over main
 *      (eth0's routes move to the overlay table with `from <eth0 IP>` rules);
 *      a later one keeps its routes in its own table with `from <its IP>` rules;
 *      the NIC's prevResult routes (its default) where its traffic is routed
 *   4. rp_filter sysctls
 * Every kernel change is pushed on an undo stack; a failure unwinds it.
 */
import { CniCode, CniError, isExistsError, link, neigh, route, rule, sysctl, UndoStack, type Netns, type Result } from '@cnikit/netlib';
import { discoverHostIPs, familyOf, ignoreNotFound, requirePodIPs, type HostIPs, type LogFn } from '@cnikit/meta';
import type { RouterConfig } from './config';
import { ensureHostRule, hostRoute, hostSubnets, MAIN_TABLE, ownedHostRoutes, releaseHostRules } from './host';
import { attachmentKey, overlayTable, ownTable, RTPROT_ROUTER } from './marks';
import { familiesOf, findHostPeer, findOverlay, type Family, type HostPeer, type Overlay } from './overlay';
import { addPrevRoutes, keepApart, moveToTable, podNextHops, prevRoutes, sharedFamilies, sharedRoutes, sharedRules } from './pod';

export interface AddRequest {
  containerId: string;
  ifName: string;
  netnsPath: string;
  podNs: Netns;
  /** The node's namespace (the process's own, except in tests). */
  hostNs: Netns;
  log: LogFn;
}

/**
 * What happens to main for one chained NIC. `first`: the pod has no router
 * state yet. migrate_route decides whether the NIC's own routes move to its
 * table (-1: unless it is the first; 0: never; 1: always); a NIC whose routes
 * stay in main takes main over from the overlay NIC (on the first such NIC).
 */
export function planMain(cfg: RouterConfig, first: boolean): { keepApart: boolean; takeMain: boolean } {
  const apart = cfg.migrateRoute === 1 || (cfg.migrateRoute === -1 && !first);
  return { keepApart: apart, takeMain: !apart };
}

/** Everything ADD and CHECK learn about the pod and the host before changing anything. */
export interface Scene {
  chainedIndex: number;
  chainedIPs: string[];
  overlay: Overlay;
  peer: HostPeer;
  families: Family[];
  hostIPs: HostIPs;
  table: number;
}

export async function lookScene(cfg: RouterConfig, hostNs: Netns, podNs: Netns, ifName: string, netnsPath: string): Promise<Scene> {
  const prev = cfg.prevResult!;
  const chainedIPs = requirePodIPs(prev, ifName);
  if (ifName === cfg.overlayInterface) {
    throw new CniError(
      CniCode.InvalidNetworkConfig,
      `router is chained on the overlay interface ${ifName}`,
      'router belongs in the secondary network (net1, net2...), not in the overlay one; see overlay_interface',
    );
  }
  const chained = await link.find(podNs, ifName);
  if (chained === undefined) {
    throw new CniError(
      CniCode.InvalidNetworkConfig,
      `interface ${ifName} not found in the pod`,
      `netns ${netnsPath}; the previous plugin should have created it`,
    );
  }
  const overlay = await findOverlay(podNs, cfg.overlayInterface, netnsPath);
  const families = familiesOf(chainedIPs, overlay);
  if (families.length === 0) {
    throw new CniError(
      CniCode.InvalidNetworkConfig,
      `overlay interface ${overlay.link.name} has no address of the family of ${ifName}'s`,
      `${ifName} has ${chainedIPs.join(', ')}; ${overlay.link.name} has ${overlay.ips.join(', ')}`,
    );
  }
  const peer = await findHostPeer(hostNs, overlay, families);
  if (families.includes(6) && peer.linkLocal === undefined) {
    throw new CniError(
      CniCode.InvalidNetworkConfig,
      `host interface ${peer.link.name} has no IPv6 link-local address`,
      `the pod's IPv6 traffic to the host goes through it; is IPv6 disabled on ${peer.link.name}?`,
    );
  }
  const hostIPs = await discoverHostIPs(
    hostNs,
    overlay.ips.filter((i) => families.includes(familyOf(i))),
  );
  return { chainedIndex: chained.index, chainedIPs, overlay, peer, families, hostIPs, table: overlayTable(cfg.overlayInterface) };
}

function setSysctls(hostNs: Netns, podNs: Netns, cfg: RouterConfig, s: Scene, ifName: string): void {
  if (!s.families.includes(4)) return;
  const v = String(cfg.rpFilter.value);
  for (const name of ['all', s.overlay.link.name, ifName]) sysctl.set(podNs, `net/ipv4/conf/${name}/rp_filter`, v);
  if (cfg.rpFilter.setHost) {
    sysctl.set(hostNs, 'net/ipv4/conf/all/rp_filter', v);
    sysctl.set(hostNs, `net/ipv4/conf/${s.peer.link.name}/rp_filter`, v);
  }
}

/** Host side of one attachment: routes, neighbours, the host rule. */
async function addHostSide(hostNs: Netns, cfg: RouterConfig, req: AddRequest, s: Scene, undo: UndoStack): Promise<void> {
  const key = attachmentKey(cfg.netName, req.containerId, req.ifName);
  const subnets = await hostSubnets(hostNs);
  const wanted = s.chainedIPs
    .filter((i) => s.families.includes(familyOf(i)))
    .map((i) => hostRoute(i, s.peer.link.index, key, subnets, cfg.hostRuleTable));

  // Pushed first so that it runs last on unwind, once our routes are gone: the host rule is
  // released (deleted only if its table is empty), never deleted outright: another attachment may rely on it.
  const ruleTables = wanted.filter((w) => w.table !== MAIN_TABLE).map((w) => ({ family: w.family!, table: w.table! }));
  if (ruleTables.length > 0) undo.push('release host rules', async () => void (await releaseHostRules(hostNs, ruleTables)));

  // Routes of router to the same IPs belong to an earlier owner of the address (or an ADD of this
  // attachment killed half-way): they go, or the older one might win.
  const stale = (await ownedHostRoutes(hostNs)).filter((r) => wanted.some((w) => w.dst === r.dst));
  for (const r of stale) {
    await ignoreNotFound(
      route.del(hostNs, { dst: r.dst, family: r.family, table: r.table, oif: r.oif, metric: r.metric, protocol: RTPROT_ROUTER }),
    );
    undo.push(`restore stale host route ${r.dst}`, () => route.replace(hostNs, r));
    req.log('removed stale host route', { dst: r.dst, table: r.table, metric: r.metric });
  }

  if (!cfg.sriov) {
    for (const w of wanted) {
      const ipAddr = w.dst.split('/')[0]!;
      await neigh.replace(hostNs, { index: s.peer.link.index, ip: ipAddr, mac: s.overlay.link.mac, state: neigh.NUD.PERMANENT });
      undo.push(`delete host neighbour ${ipAddr}`, () => ignoreNotFound(neigh.del(hostNs, { index: s.peer.link.index, ip: ipAddr })));
    }
  }
  for (const w of wanted) {
    await route.replace(hostNs, w);
    undo.push(`delete host route ${w.dst}`, () => ignoreNotFound(route.del(hostNs, w)));
  }
  for (const { family, table } of ruleTables) {
    if (await ensureHostRule(hostNs, family, table)) req.log('added host rule', { family, table });
  }
}

/** Pod state shared by the pod's router NICs, for the families that lack it. */
async function addShared(podNs: Netns, cfg: RouterConfig, s: Scene, families: Family[], takeMain: boolean, undo: UndoStack): Promise<void> {
  if (takeMain) {
    const ips = s.overlay.ips.filter((i) => families.includes(familyOf(i)));
    await moveToTable(podNs, s.overlay.link.index, ips, families, s.table, undo);
  }
  if (!cfg.sriov) {
    for (const h of podNextHops(s.hostIPs, families, s.peer.linkLocal)) {
      await neigh.replace(podNs, { index: s.overlay.link.index, ip: h, mac: s.peer.link.mac, state: neigh.NUD.PERMANENT });
      undo.push(`delete pod neighbour ${h}`, () => ignoreNotFound(neigh.del(podNs, { index: s.overlay.link.index, ip: h })));
    }
  }
  for (const r of sharedRoutes(cfg, s.overlay.link.index, s.overlay.ips, s.hostIPs, families, s.table, s.peer.linkLocal)) {
    try {
      await route.add(podNs, r);
    } catch (e) {
      // eth0's own route to that destination, moved here (a hijacked subnet that is also eth0's
      // connected subnet): it already leads through eth0, and replacing it would lose it.
      if (isExistsError(e)) continue;
      throw e;
    }
    undo.push(`delete pod route ${r.dst} table ${r.table}`, () => ignoreNotFound(route.del(podNs, r)));
  }
  for (const r of sharedRules(cfg, s.hostIPs, families, s.table)) {
    try {
      await rule.add(podNs, r);
    } catch (e) {
      if (isExistsError(e)) continue; // identical rule already there (a listed subnet twice in another family list)
      throw e;
    }
    undo.push(`delete pod rule to ${r.dst} lookup ${r.table}`, () => ignoreNotFound(rule.del(podNs, r)));
  }
}

export async function addRouter(cfg: RouterConfig, req: AddRequest): Promise<Result> {
  const hostNs = req.hostNs;
  const s = await lookScene(cfg, hostNs, req.podNs, req.ifName, req.netnsPath);
  const have = await sharedFamilies(req.podNs, s.table);
  const first = have.length === 0;
  const plan = planMain(cfg, first);
  req.log('plan', { families: s.families, first, ...plan, overlayTable: s.table, peer: s.peer.link.name, hostIPs: s.hostIPs });

  const undo = new UndoStack();
  try {
    setSysctls(hostNs, req.podNs, cfg, s, req.ifName);
    await addHostSide(hostNs, cfg, req, s, undo);
    const missing = s.families.filter((f) => !have.includes(f));
    if (missing.length > 0) await addShared(req.podNs, cfg, s, missing, plan.takeMain && first, undo);
    if (plan.keepApart) await keepApart(req.podNs, s.chainedIndex, s.chainedIPs, ownTable(req.ifName), undo);
    // The NIC's own routes from prevResult (its default route, typically) where its traffic is routed.
    const table = plan.keepApart ? ownTable(req.ifName) : plan.takeMain && first ? MAIN_TABLE : undefined;
    if (table !== undefined)
      await addPrevRoutes(req.podNs, prevRoutes(cfg.prevResult!, req.ifName, s.chainedIndex, s.families, table), undo);
    undo.commit();
  } catch (e) {
    const failed = await undo.unwind();
    if (failed.length > 0) req.log('rollback incomplete', { failed });
    throw e;
  }
  const result: Result = structuredClone(cfg.prevResult!);
  result.cniVersion = cfg.cniVersion;
  return result;
}
