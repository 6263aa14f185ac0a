/**
 * The NAT client side of Coil's egress, in a client pod's network namespace (called by coild).
 * Everything is read back from the kernel: rule priorities 1800-2100, tables 117/118, device
 * names fou4_/fou6_/coil_ipip4/6 and the FoU ports are the state; there are no side files, so
 * a restarted coild reconciles from what the pod holds. The pod's own routes (its veth, the
 * default route of the pod network) are never touched.
 */
import { fou, isNotFoundError, link, openNetns, openNetnsIfPresent, route, rule, type Netns } from '@cnikit/netlib';
import {
  CATCH_ALL_V4,
  CATCH_ALL_V6,
  IPPROTO_IPIP,
  IPPROTO_IPV6,
  PREF_LINK_LOCAL,
  PREF_NAT_PUBLIC,
  PROTOCOL_COIL,
  TABLE_NAT_PRIVATE,
  TABLE_NAT_PUBLIC,
} from './constants';
import {
  clientRules,
  diffByKey,
  planClient,
  ruleKey,
  type ClientPlan,
  type Family,
  type NatClientConfig,
  type RulePlan,
} from './client-plan';
import { deleteLink, ensureCatchAll, ensureFouPorts, ensureTunnel, listFouTunnels, removeFouPorts } from './tunnels';

export type { EgressPeer, NatClientConfig } from './client-plan';

const NAT_TABLES = [TABLE_NAT_PRIVATE, TABLE_NAT_PUBLIC];

/**
 * Idempotent, converging: creates what is missing, updates what changed (destinations, sport
 * mode), removes devices/routes/rules no longer wanted. An empty `egresses` removes everything.
 */
export async function reconcileNatClient(netnsPath: string, cfg: NatClientConfig): Promise<void> {
  const plan = planClient(cfg);
  if (plan.families.length === 0) return removeNatClient(netnsPath);
  const ns = openNetns(netnsPath);
  try {
    await applyClientPlan(ns, plan);
  } finally {
    ns.close();
  }
}

/**
 * Removes every egress object from the pod netns (devices fou4_/fou6_/coil_ipip4/6, FoU ports,
 * rules 1800-2100, tables 117/118). Idempotent; an absent netns is not an error.
 */
export async function removeNatClient(netnsPath: string): Promise<void> {
  const ns = openNetnsIfPresent(netnsPath);
  if (ns === undefined) return;
  try {
    await removeFamilies(ns, [4, 6]);
  } finally {
    ns.close();
  }
}

/** Reads back what is configured (for CHECK, tests and coild's live-update diff). */
export async function readNatClient(
  netnsPath: string,
): Promise<{ fouPort?: number; peers: Array<{ peer: string; sportAuto: boolean; destinations: string[] }> }> {
  const ns = openNetns(netnsPath);
  try {
    const port = (await fou.list(ns)).find((p) => p.type === 'direct' && (p.ipproto === IPPROTO_IPIP || p.ipproto === IPPROTO_IPV6));
    const routes = await natRoutes(ns);
    const peers = (await listFouTunnels(ns))
      .filter((t) => t.tunnel?.remote)
      .map((t) => ({
        peer: t.tunnel!.remote!,
        sportAuto: (t.tunnel!.encap?.sport ?? 0) === 0,
        destinations: routes
          .filter((r) => r.oif === t.index)
          .map(routeDst)
          .sort(),
      }))
      .sort((a, b) => a.peer.localeCompare(b.peer));
    return { ...(port ? { fouPort: port.port } : {}), peers };
  } finally {
    ns.close();
  }
}

async function applyClientPlan(ns: Netns, plan: ClientPlan): Promise<void> {
  const gone = ([4, 6] as Family[]).filter((f) => !plan.families.includes(f));
  if (gone.length > 0) await removeFamilies(ns, gone);

  // Receivers first: a reply may arrive as soon as the first route sends a packet.
  await removeFouPorts(ns, { port: plan.fouPort, families: plan.families });
  await ensureFouPorts(ns, plan.fouPort, plan.families);
  for (const f of plan.families) await ensureCatchAll(ns, f);

  for (const t of plan.tunnels) await ensureTunnel(ns, t);
  const wanted = new Set(plan.tunnels.map((t) => t.name));
  for (const t of await listFouTunnels(ns)) if (!wanted.has(t.name)) await deleteLink(ns, t.index);

  await convergeRules(ns, plan.rules, plan.families);
  await convergeRoutes(ns, plan);
}

/** Our rules of the given families as the kernel has them (identified by their priorities). */
async function natRules(ns: Netns, families: Family[]): Promise<RulePlan[]> {
  const out: RulePlan[] = [];
  for (const family of families) {
    for (const r of await rule.list(ns, family)) {
      const p = r.priority ?? 0;
      if (p < PREF_LINK_LOCAL || p > PREF_NAT_PUBLIC) continue;
      // Only the shapes Coil installs: a rule of another program at these priorities stays.
      const ours =
        clientRules(family).some((c) => c.priority === p && c.table === r.table && c.dst === r.dst) || NAT_TABLES.includes(r.table);
      if (ours && !r.src && !r.iif && !r.oif && r.fwmark === undefined)
        out.push({ family, priority: p, table: r.table, ...(r.dst ? { dst: r.dst } : {}) });
    }
  }
  return out;
}

async function convergeRules(ns: Netns, want: RulePlan[], families: Family[]): Promise<void> {
  const d = diffByKey(want, await natRules(ns, families), ruleKey, ruleKey, () => true);
  for (const r of d.remove) await delRule(ns, r);
  for (const r of d.add) await rule.add(ns, r);
}

async function delRule(ns: Netns, r: RulePlan): Promise<void> {
  try {
    await rule.del(ns, r);
  } catch (err) {
    if (!isNotFoundError(err)) throw err;
  }
}

/** Every route of tables 117 and 118. */
async function natRoutes(ns: Netns): Promise<route.Route[]> {
  const out: route.Route[] = [];
  for (const table of NAT_TABLES) out.push(...(await route.list(ns, { table })));
  return out;
}

async function convergeRoutes(ns: Netns, plan: ClientPlan): Promise<void> {
  const index = new Map<string, number>();
  for (const t of plan.tunnels) index.set(t.name, (await link.get(ns, t.name)).index);
  const want: route.Route[] = plan.routes.map((r) => ({ dst: r.dst, table: r.table, oif: index.get(r.dev)! }));
  const key = (r: route.Route): string => `${r.table} ${routeDst(r)}`;
  const d = diffByKey(want, await natRoutes(ns), key, key, (w, h) => h.oif === w.oif && h.protocol === PROTOCOL_COIL && !h.gw);
  for (const r of d.remove) await delRoute(ns, r);
  // replace: a destination moved to another Egress's tunnel changes in one step, no gap.
  for (const r of d.add) await route.replace(ns, { ...r, protocol: PROTOCOL_COIL });
}

/** A route's prefix as the plan writes it: the kernel's whole-space routes read back as "default". */
function routeDst(r: route.Route): string {
  if (r.dst !== 'default') return r.dst;
  return r.family === 6 ? '::/0' : '0.0.0.0/0';
}

async function delRoute(ns: Netns, r: route.Route): Promise<void> {
  try {
    await route.del(ns, { dst: r.dst, table: r.table, ...(r.family ? { family: r.family } : {}) });
  } catch (err) {
    if (!isNotFoundError(err)) throw err;
  }
}

/** Removes the egress state of some families (rules, tables, tunnels, receivers, FoU ports). */
async function removeFamilies(ns: Netns, families: Family[]): Promise<void> {
  for (const r of await natRules(ns, families)) await delRule(ns, r);
  for (const r of await natRoutes(ns)) if (families.includes(r.family ?? 4)) await delRoute(ns, r);
  for (const t of await listFouTunnels(ns)) if (families.includes(t.kind === 'ipip' ? 4 : 6)) await deleteLink(ns, t.index);
  if (families.includes(4)) await deleteLink(ns, CATCH_ALL_V4);
  if (families.includes(6)) await deleteLink(ns, CATCH_ALL_V6);
  for (const p of await fou.list(ns)) {
    if (!families.includes(p.family) || p.type !== 'direct' || (p.ipproto !== IPPROTO_IPIP && p.ipproto !== IPPROTO_IPV6)) continue;
    try {
      await fou.del(ns, { port: p.port, family: p.family });
    } catch (err) {
      if (!isNotFoundError(err)) throw err;
    }
  }
}
