/**
 * Kernel work both ends of the egress NAT share: FoU receive ports, the flow-based catch-all
 * receivers and the per-peer FoU tunnel devices. Every function converges: it leaves the
 * namespace as asked whatever was there before, and changes nothing when it already is.
 */
import { fou, isExistsError, isNotFoundError, LinkNotFoundError, link, sysctl, tunnel, type Netns } from '@cnikit/netlib';
import { CATCH_ALL_V4, CATCH_ALL_V6, IPPROTO_IPIP, IPPROTO_IPV6, TUNNEL_TTL } from './constants';
import type { Family, TunnelPlan } from './client-plan';
import { isFouLinkName } from './names';

const ipprotoOf = (family: Family): number => (family === 4 ? IPPROTO_IPIP : IPPROTO_IPV6);

/** Opens the FoU port for each family (IPv4-in-UDP4 / IPv6-in-UDP6); already open is fine. */
export async function ensureFouPorts(ns: Netns, port: number, families: Family[]): Promise<void> {
  for (const family of families) {
    try {
      await fou.add(ns, { port, family, ipproto: ipprotoOf(family) });
    } catch (err) {
      if (!isExistsError(err)) throw err;
    }
  }
}

/**
 * Closes the FoU ports that carry ipip / IPv6 payloads: of every port number, or of `keep`'s
 * families only when their port differs from `keep.port` (a changed --fou-port).
 */
export async function removeFouPorts(ns: Netns, keep?: { port: number; families: Family[] }): Promise<void> {
  for (const p of await fou.list(ns)) {
    if (p.type !== 'direct' || (p.ipproto !== IPPROTO_IPIP && p.ipproto !== IPPROTO_IPV6)) continue;
    if (keep && keep.families.includes(p.family) && p.port === keep.port) continue;
    try {
      await fou.del(ns, { port: p.port, family: p.family });
    } catch (err) {
      if (!isNotFoundError(err)) throw err;
    }
  }
}

/**
 * Turns reverse-path filtering off for a tunnel device. Replies come back on a device other
 * than the one the route to their source uses (the catch-all receives what fou4_<peer>
 * sent), which strict mode drops. The effective mode is max(all, device): a strict `all`
 * is lowered to loose (2), which accepts these packets and keeps the rest of the pod checked.
 */
export function relaxRpFilter(ns: Netns, dev: string): void {
  sysctl.set(ns, `net/ipv4/conf/${dev}/rp_filter`, 0);
  if (sysctl.get(ns, 'net/ipv4/conf/all/rp_filter') === '1') sysctl.set(ns, 'net/ipv4/conf/all/rp_filter', 2);
}

async function ensureUp(ns: Netns, name: string, up: boolean): Promise<void> {
  if (!up) await link.setUp(ns, name);
}

/**
 * No IPv6 link-local address on a tunnel device (addr_gen_mode 1 = none), set while it is still
 * down. Otherwise bringing it up starts DAD, router solicitations and MLD reports, which the
 * device would FoU-encapsulate to the peer: noise on every pod, counted as tunnel traffic.
 */
function noLinkLocal(ns: Netns, name: string): void {
  try {
    sysctl.set(ns, `net/ipv6/conf/${name}/addr_gen_mode`, 1);
  } catch (err) {
    // No IPv6 in this kernel or namespace: nothing to silence.
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
}

/** Brings a freshly created (down) tunnel device up the way both ends want it. */
async function bringUp(ns: Netns, name: string, family: Family): Promise<void> {
  noLinkLocal(ns, name);
  if (family === 4) relaxRpFilter(ns, name);
  await link.setUp(ns, name);
}

/** Creates (or repairs) the flow-based receiver of a family: `coil_ipip4` / `coil_ipip6`, external. */
export async function ensureCatchAll(ns: Netns, family: Family): Promise<boolean> {
  const name = family === 4 ? CATCH_ALL_V4 : CATCH_ALL_V6;
  const have = await detailsOrUndefined(ns, name);
  const kind = family === 4 ? 'ipip' : 'ip6tnl';
  if (have && have.kind === kind && have.tunnel?.external) {
    await ensureUp(ns, name, have.up);
    return false;
  }
  if (have) await link.del(ns, name);
  if (family === 4) await tunnel.addIpip(ns, { name, external: true });
  else await tunnel.addIp6tnl(ns, { name, external: true, proto: 'ip6ip6' });
  await bringUp(ns, name, family);
  return true;
}

/** Whether a device read back from the kernel is exactly the tunnel planned. */
export function tunnelMatches(want: TunnelPlan, have: tunnel.LinkDetails | undefined): boolean {
  const t = have?.tunnel;
  if (!have || !t || t.external) return false;
  if (have.kind !== (want.family === 4 ? 'ipip' : 'ip6tnl')) return false;
  if (want.family === 6 && t.proto !== 'ip6ip6') return false;
  return (
    t.remote === want.remote &&
    t.local === want.local &&
    t.encap?.type === 'fou' &&
    t.encap.dport === want.dport &&
    t.encap.sport === want.sport
  );
}

export type TunnelChange = 'unchanged' | 'changed' | 'created';

/**
 * Makes the device `want.name` the planned FoU tunnel, up. A tunnel of the right kind with other
 * parameters (typically the encap source port after fouSourcePortAuto changed) is changed in
 * place: same index, routes kept, no moment where egress traffic falls back to the pod network.
 * Anything else under that name is deleted and created again (its routes go with it: callers
 * converge routes afterwards).
 */
export async function ensureTunnel(ns: Netns, want: TunnelPlan): Promise<TunnelChange> {
  const have = await detailsOrUndefined(ns, want.name);
  if (tunnelMatches(want, have)) {
    await ensureUp(ns, want.name, have!.up);
    return 'unchanged';
  }
  const o = {
    name: want.name,
    remote: want.remote,
    ...(want.local ? { local: want.local } : {}),
    ttl: TUNNEL_TTL,
    encap: { type: 'fou' as const, dport: want.dport, sport: want.sport },
  };
  const kind = want.family === 4 ? 'ipip' : 'ip6tnl';
  if (have && have.kind === kind && have.tunnel && !have.tunnel.external) {
    try {
      if (want.family === 4) await tunnel.changeIpip(ns, o);
      else await tunnel.changeIp6tnl(ns, { ...o, proto: 'ip6ip6' });
      if (tunnelMatches(want, await detailsOrUndefined(ns, want.name))) {
        await ensureUp(ns, want.name, have.up);
        return 'changed';
      }
    } catch (err) {
      // EEXIST: another device has these endpoints; recreating below reports the real conflict.
      if (!isExistsError(err)) throw err;
    }
  }
  if (have) await link.del(ns, want.name);
  if (want.family === 4) await tunnel.addIpip(ns, o);
  else await tunnel.addIp6tnl(ns, { ...o, proto: 'ip6ip6' });
  await bringUp(ns, want.name, want.family);
  return 'created';
}

/** The fou4_/fou6_ devices of a namespace, with their tunnel parameters. */
export async function listFouTunnels(ns: Netns): Promise<tunnel.LinkDetails[]> {
  const out: tunnel.LinkDetails[] = [];
  for (const l of await link.list(ns)) {
    if (!isFouLinkName(l.name)) continue;
    const d = await detailsOrUndefined(ns, l.index);
    if (d) out.push(d);
  }
  return out;
}

/** Deletes a link; absent is fine (another reconcile or the kernel got there first). */
export async function deleteLink(ns: Netns, name: string | number): Promise<void> {
  try {
    await link.del(ns, name);
  } catch (err) {
    if (!isNotFoundError(err) && !(err instanceof LinkNotFoundError)) throw err;
  }
}

async function detailsOrUndefined(ns: Netns, l: string | number): Promise<tunnel.LinkDetails | undefined> {
  try {
    return await tunnel.details(ns, l);
  } catch (err) {
    if (err instanceof LinkNotFoundError) return undefined;
    throw err;
  }
}
