/**
 * The router side of Coil's egress, in a router pod's network namespace (run by coil-egress):
 * converges tunnels, routes and rules to a list of client addresses (router-plan.ts). Kept free
 * of Kubernetes so that it is tested with plain addresses; watch.ts feeds it from the API.
 */
import { isNotFoundError, link, route, rule, sysctl, type Netns } from '@cnikit/netlib';
import { PREF_ROUTER, PROTOCOL_COIL, TABLE_ROUTER } from './constants';
import { diffByKey } from './client-plan';
import { planRouter, type RouterConfig, type RouterPlan, type RouterRulePlan } from './router-plan';
import { deleteLink, ensureCatchAll, ensureFouPorts, ensureTunnel, listFouTunnels, removeFouPorts } from './tunnels';

export type { RouterConfig } from './router-plan';

export interface RouterReconcileResult {
  /** Tunnels created (or recreated). */
  created: string[];
  /** Tunnels changed in place (e.g. the encap source port). */
  changed: string[];
  /** Tunnels of clients that are gone. */
  removed: string[];
  /** Clients served after this pass. */
  clients: number;
}

/** Converges the router pod's netns to `cfg`. Idempotent: a second call with the same config changes nothing. */
export async function reconcileRouter(ns: Netns, cfg: RouterConfig): Promise<RouterReconcileResult> {
  const plan = planRouter(cfg);
  // The router forwards between its tunnels and the uplink.
  if (plan.families.includes(4) && sysctl.get(ns, 'net/ipv4/ip_forward') !== '1') sysctl.set(ns, 'net/ipv4/ip_forward', 1);
  if (plan.families.includes(6) && sysctl.get(ns, 'net/ipv6/conf/all/forwarding') !== '1')
    sysctl.set(ns, 'net/ipv6/conf/all/forwarding', 1);
  // Reverse-path filtering is relaxed on each tunnel as it is created (tunnels.ts): inner packets
  // from a client arrive on its tunnel while the main table routes the client via the uplink.

  await removeFouPorts(ns, { port: plan.fouPort, families: plan.families });
  await ensureFouPorts(ns, plan.fouPort, plan.families);
  for (const f of plan.families) await ensureCatchAll(ns, f);

  const created: string[] = [];
  const changed: string[] = [];
  for (const t of plan.tunnels) {
    const c = await ensureTunnel(ns, t);
    if (c === 'created') created.push(t.name);
    else if (c === 'changed') changed.push(t.name);
  }
  const wanted = new Set(plan.tunnels.map((t) => t.name));
  const removed: string[] = [];
  for (const t of await listFouTunnels(ns)) {
    if (wanted.has(t.name)) continue;
    await deleteLink(ns, t.index);
    removed.push(t.name);
  }
  await convergeRules(ns, plan);
  await convergeRoutes(ns, plan);
  return { created, changed, removed, clients: plan.tunnels.length };
}

/** Removes every tunnel, route and rule reconcileRouter made (the FoU ports and catch-alls stay). */
export async function removeRouterClients(ns: Netns): Promise<void> {
  for (const t of await listFouTunnels(ns)) await deleteLink(ns, t.index);
  for (const r of await route.list(ns, { table: TABLE_ROUTER }))
    await delIgnoringAbsent(() => route.del(ns, { dst: r.dst, table: TABLE_ROUTER, family: r.family }));
  for (const r of await routerRules(ns)) await delIgnoringAbsent(() => rule.del(ns, r));
}

const ruleKey = (r: RouterRulePlan): string => `${r.family} ${r.priority} ${r.table} ${r.iif}`;

async function routerRules(ns: Netns): Promise<RouterRulePlan[]> {
  const out: RouterRulePlan[] = [];
  for (const r of await rule.list(ns)) {
    if (r.priority === PREF_ROUTER && r.table === TABLE_ROUTER && r.iif && !r.dst && !r.src)
      out.push({ family: r.family, priority: PREF_ROUTER, table: TABLE_ROUTER, iif: r.iif });
  }
  return out;
}

async function convergeRules(ns: Netns, plan: RouterPlan): Promise<void> {
  const d = diffByKey(plan.rules, await routerRules(ns), ruleKey, ruleKey, () => true);
  for (const r of d.remove) await delIgnoringAbsent(() => rule.del(ns, r));
  for (const r of d.add) await rule.add(ns, r);
}

async function convergeRoutes(ns: Netns, plan: RouterPlan): Promise<void> {
  const index = new Map<string, number>();
  for (const t of plan.tunnels) index.set(t.name, (await link.get(ns, t.name)).index);
  const want: route.Route[] = plan.routes.map((r) => ({ dst: r.dst, table: r.table, oif: index.get(r.dev)! }));
  const key = (r: route.Route): string => r.dst;
  const d = diffByKey(
    want,
    await route.list(ns, { table: TABLE_ROUTER }),
    key,
    key,
    (w, h) => h.oif === w.oif && h.protocol === PROTOCOL_COIL && !h.gw,
  );
  for (const r of d.remove) await delIgnoringAbsent(() => route.del(ns, { dst: r.dst, table: TABLE_ROUTER, family: r.family }));
  for (const r of d.add) await route.replace(ns, { ...r, protocol: PROTOCOL_COIL });
}

async function delIgnoringAbsent(fn: () => Promise<void>): Promise<void> {
  try {
    await fn();
  } catch (err) {
    if (!isNotFoundError(err)) throw err;
  }
}
