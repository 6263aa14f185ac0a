/**
 * What a router pod's netns should hold for its clients: pure data (router.ts applies it).
 * One FoU tunnel per client address back to the client, a host route to the client through
 * it in table 118, and a rule sending only packets that come in from the uplink (the replies
 * MASQUERADE has translated back) to that table. The tunnels' own UDP packets to the clients
 * are locally generated, so they keep using the main table: were the host route in main, the
 * outer packet to a client would be routed into the tunnel it leaves from.
 */
import { ip } from '@cnikit/netlib';
import { PREF_ROUTER, TABLE_ROUTER } from './constants';
import type { Family, RoutePlan, TunnelPlan } from './client-plan';
import { fouLinkName } from './names';

export interface RouterConfig {
  /** FoU port the router listens on and sends to (the clients' port). */
  fouPort: number;
  /** The router pod's own addresses: tunnel local, and what SNAT leaves alone. */
  podIPv4?: string;
  podIPv6?: string;
  /** The interface towards the outside world; default "eth0". */
  uplink?: string;
  /** The Egress's fouSourcePortAuto: encap sport chosen per flow, else sport = fouPort. */
  sportAuto: boolean;
  /** Client pod addresses (either family; those of a family the router lacks are skipped). */
  clients: string[];
}

export interface RouterRulePlan {
  family: Family;
  priority: number;
  table: number;
  iif: string;
}

export interface RouterPlan {
  families: Family[];
  fouPort: number;
  uplink: string;
  tunnels: TunnelPlan[];
  routes: RoutePlan[];
  rules: RouterRulePlan[];
}

export const DEFAULT_UPLINK = 'eth0';

export function planRouter(cfg: RouterConfig): RouterPlan {
  const uplink = cfg.uplink ?? DEFAULT_UPLINK;
  const families: Family[] = [];
  if (cfg.podIPv4) families.push(4);
  if (cfg.podIPv6) families.push(6);
  const plan: RouterPlan = {
    families,
    fouPort: cfg.fouPort,
    uplink,
    tunnels: [],
    routes: [],
    rules: families.map((family) => ({ family, priority: PREF_ROUTER, table: TABLE_ROUTER, iif: uplink })),
  };
  const seen = new Set<string>();
  for (const c of cfg.clients) {
    const remote = ip.canonicalIp(c);
    const family = ip.familyOf(remote);
    const local = family === 4 ? cfg.podIPv4 : cfg.podIPv6;
    if (!local || seen.has(remote)) continue;
    seen.add(remote);
    const name = fouLinkName(remote);
    plan.tunnels.push({ name, family, local: ip.canonicalIp(local), remote, dport: cfg.fouPort, sport: cfg.sportAuto ? 0 : cfg.fouPort });
    plan.routes.push({ dst: `${remote}/${family === 4 ? 32 : 128}`, table: TABLE_ROUTER, dev: name });
  }
  return plan;
}
