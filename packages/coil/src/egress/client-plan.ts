/**
 * What a NAT client pod's netns should hold, computed from the Egresses it uses: pure data,
 * no kernel, so that the plans and their diffs are unit-tested on their own (nat-client.ts
 * applies them).
 */
import { ip } from '@cnikit/netlib';
import {
  LINK_LOCAL_V4,
  LINK_LOCAL_V6,
  PREF_LINK_LOCAL,
  PREF_NAT_PRIVATE,
  PREF_NAT_PUBLIC,
  PREF_PRIVATE_BASE,
  PRIVATE_V4,
  PRIVATE_V6,
  TABLE_NAT_PRIVATE,
  TABLE_NAT_PUBLIC,
} from './constants';
import { fouLinkName } from './names';

export type Family = 4 | 6;

export interface EgressPeer {
  /** Egress namespace. */
  namespace: string;
  /** Egress name. */
  name: string;
  /** The Egress Service ClusterIP (v4), tunnel remote. */
  peerIPv4?: string;
  /** The Egress Service ClusterIP (v6). */
  peerIPv6?: string;
  /** CIDRs from spec.destinations. */
  destinations: string[];
  /** Encap sport chosen per flow by the kernel; else sport = fouPort. */
  fouSourcePortAuto: boolean;
}

export interface NatClientConfig {
  /** 5555 by default. */
  fouPort: number;
  /** The pod's own addresses (tunnel local). */
  podIPv4?: string;
  podIPv6?: string;
  /** Empty = remove everything egress-related. */
  egresses: EgressPeer[];
}

/** One policy rule; `dst` absent = every destination. */
export interface RulePlan {
  family: Family;
  priority: number;
  table: number;
  dst?: string;
}

/** One FoU tunnel device (ipip for IPv4, ip6tnl ip6ip6 for IPv6). */
export interface TunnelPlan {
  name: string;
  family: Family;
  local?: string;
  remote: string;
  dport: number;
  /** 0 = auto (per flow). */
  sport: number;
}

export interface RoutePlan {
  dst: string;
  table: number;
  /** Device name (a TunnelPlan's). */
  dev: string;
}

export interface ClientPlan {
  families: Family[];
  fouPort: number;
  rules: RulePlan[];
  tunnels: TunnelPlan[];
  routes: RoutePlan[];
}

/** Rules of one family, as today's Coil installs them (the numbers are in constants.ts). */
export function clientRules(family: Family): RulePlan[] {
  const main = 254;
  const priv = family === 4 ? PRIVATE_V4 : PRIVATE_V6;
  return [
    // Link-local (metadata services, the node's fe80 gateway) never goes through a tunnel.
    { family, priority: PREF_LINK_LOCAL, table: main, dst: family === 4 ? LINK_LOCAL_V4 : LINK_LOCAL_V6 },
    // Private destinations an Egress names win over the pod network's routes...
    { family, priority: PREF_NAT_PRIVATE, table: TABLE_NAT_PRIVATE },
    // ...the rest of private space stays on the pod network (other pods, Services, the node)...
    ...priv.map((dst, i) => ({ family, priority: PREF_PRIVATE_BASE + i, table: main, dst })),
    // ...and public destinations of an Egress come last, so a public Egress cannot capture pod traffic.
    { family, priority: PREF_NAT_PUBLIC, table: TABLE_NAT_PUBLIC },
  ];
}

/** The table a destination belongs to: 117 when it lies inside private space, 118 otherwise. */
export function tableFor(cidr: string): number {
  const family = ip.familyOf(cidr);
  const priv: readonly string[] = family === 4 ? PRIVATE_V4 : PRIVATE_V6;
  return priv.some((p) => ip.contains(p, cidr)) ? TABLE_NAT_PRIVATE : TABLE_NAT_PUBLIC;
}

/**
 * The plan for a client pod. A family is set up only when the pod has an address of it; an
 * Egress contributes a tunnel of a family when it has a peer of that family, and routes for
 * its destinations of that family. When two Egresses name the same destination the first one
 * in `egresses` keeps it (routes are unique per table and prefix).
 */
export function planClient(cfg: NatClientConfig): ClientPlan {
  const families: Family[] = [];
  if (cfg.egresses.length > 0) {
    if (cfg.podIPv4) families.push(4);
    if (cfg.podIPv6) families.push(6);
  }
  const plan: ClientPlan = { families, fouPort: cfg.fouPort, rules: families.flatMap(clientRules), tunnels: [], routes: [] };
  const seenTunnel = new Set<string>();
  const seenRoute = new Set<string>();
  for (const e of cfg.egresses) {
    for (const family of families) {
      const peer = family === 4 ? e.peerIPv4 : e.peerIPv6;
      if (!peer) continue;
      const remote = ip.canonicalIp(peer);
      if (ip.familyOf(remote) !== family)
        throw new TypeError(`egress ${e.namespace}/${e.name}: peerIPv${family} ${JSON.stringify(peer)} is not an IPv${family} address`);
      const name = fouLinkName(remote);
      if (!seenTunnel.has(name)) {
        seenTunnel.add(name);
        const local = family === 4 ? cfg.podIPv4 : cfg.podIPv6;
        plan.tunnels.push({
          name,
          family,
          local: local && ip.canonicalIp(local),
          remote,
          dport: cfg.fouPort,
          sport: e.fouSourcePortAuto ? 0 : cfg.fouPort,
        });
      }
      for (const d of e.destinations) {
        if (ip.familyOf(d) !== family) continue;
        const dst = normalizeDestination(d);
        const table = tableFor(dst);
        const key = `${table} ${dst}`;
        if (seenRoute.has(key)) continue;
        seenRoute.add(key);
        plan.routes.push({ dst, table, dev: name });
      }
    }
  }
  return plan;
}

/**
 * "203.0.113.7/24" -> "203.0.113.0/24" (the kernel refuses a route prefix with host bits set);
 * a bare address becomes a host prefix.
 */
export function normalizeDestination(d: string): string {
  return d.includes('/') ? ip.networkOf(d) : `${ip.canonicalIp(d)}/${ip.familyOf(d) === 4 ? 32 : 128}`;
}

/** Lists two sets of keyed items apart: what to add (or change) and what to remove. */
export function diffByKey<T, U>(
  want: T[],
  have: U[],
  keyOfWant: (t: T) => string,
  keyOfHave: (u: U) => string,
  same: (t: T, u: U) => boolean,
): { add: T[]; remove: U[] } {
  const haveBy = new Map(have.map((u) => [keyOfHave(u), u]));
  const wantKeys = new Set(want.map(keyOfWant));
  return {
    add: want.filter((t) => {
      const u = haveBy.get(keyOfWant(t));
      return !u || !same(t, u);
    }),
    remove: have.filter((u) => !wantKeys.has(keyOfHave(u))),
  };
}

export const ruleKey = (r: { family: Family; priority?: number; table: number; dst?: string }): string =>
  `${r.family} ${r.priority ?? '-'} ${r.table} ${r.dst ?? 'all'}`;
