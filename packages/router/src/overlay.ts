/**
 * What router needs to know about the pod's overlay NIC: the link, its
 * addresses, and its peer on the host (the host interface through which the
 * host reaches the overlay address: calico's cali*, cilium's lxc*, or the
 * bridge of a bridge-based overlay such as flannel's cni0).
 */
import { addr, CniCode, CniError, link, route, type Netns } from '@cnikit/netlib';
import { familyOf } from '@cnikit/meta';

type Link = link.Link;

export type Family = 4 | 6;

export interface Overlay {
  link: Link;
  /** Global addresses of the overlay NIC (no prefix), IPv4 first. */
  ips: string[];
}

export interface HostPeer {
  link: Link;
  /**
   * The peer's IPv6 link-local address: the pod's IPv6 next hop. (A global
   * host address as an on-link gateway is refused by the kernel when main
   * routes it through another NIC, e.g. net1's subnet holding the host's IP.)
   */
  linkLocal?: string;
}

/** Global-scope addresses of a link, plain (no prefix), IPv4 first. */
export async function globalIPs(ns: Netns, index: number): Promise<string[]> {
  const out = (await addr.list(ns, { index })).filter((a) => a.scope === 0).map((a) => a.address.split('/')[0]!);
  return out.sort((a, b) => familyOf(a) - familyOf(b));
}

/** The overlay NIC in the pod; code 7 when it is absent or has no global address. */
export async function findOverlay(podNs: Netns, name: string, netnsPath: string): Promise<Overlay> {
  const l = await link.find(podNs, name);
  if (l === undefined) {
    throw new CniError(
      CniCode.InvalidNetworkConfig,
      `overlay interface ${name} not found in the pod`,
      `netns ${netnsPath}; router must be chained in a secondary network of a pod whose first NIC comes from the overlay CNI (see overlay_interface)`,
    );
  }
  const ips = await globalIPs(podNs, l.index);
  if (ips.length === 0) {
    throw new CniError(
      CniCode.InvalidNetworkConfig,
      `overlay interface ${name} has no address`,
      `netns ${netnsPath}: no global IPv4 or IPv6 address on ${name}`,
    );
  }
  return { link: l, ips };
}

/** The host link towards the overlay address (`ip route get <overlay IP>` on the host). */
export async function findHostPeer(hostNs: Netns, overlay: Overlay, families: Family[]): Promise<HostPeer> {
  const errors: string[] = [];
  for (const ip of overlay.ips.filter((i) => families.includes(familyOf(i)))) {
    try {
      const r = await route.get(hostNs, ip);
      if (r.oif === undefined) {
        errors.push(`${ip}: no output interface`);
        continue;
      }
      const peer: HostPeer = { link: await link.get(hostNs, r.oif) };
      const ll = (await addr.list(hostNs, { index: r.oif, family: 6 })).find((a) => a.scope === 253);
      if (ll !== undefined) peer.linkLocal = ll.address.split('/')[0]!;
      return peer;
    } catch (e) {
      errors.push(`${ip}: ${e instanceof Error ? e.message : String(e)}`);
    }
  }
  throw new CniError(
    CniCode.InvalidNetworkConfig,
    `the host has no route to the overlay interface ${overlay.link.name}`,
    `looked up ${overlay.ips.join(', ')}: ${errors.join('; ')}`,
  );
}

/** Families router handles for an attachment: those of the chained IPs that the overlay NIC also has. */
export function familiesOf(chainedIPs: string[], overlay: Overlay): Family[] {
  const mine = new Set(chainedIPs.map(familyOf));
  const theirs = new Set(overlay.ips.map(familyOf));
  return ([4, 6] as const).filter((f) => mine.has(f) && theirs.has(f));
}
