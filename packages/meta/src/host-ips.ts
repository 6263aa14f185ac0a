/**
 * Which host addresses a meta-plugin pins inside the pod. The first address of
 * each family is the host's source address towards the pod (what `ip route get
 * <podIP>` picks), so replies from the host come from an address the pod
 * routes back through the veth; the rest are the host's other addresses on
 * real interfaces, so the pod reaches the host on any of them.
 */
import { addr, CniError, CniCode, link, route, type Netns } from '@cnikit/netlib';
import { familyOf } from './pod-ips';

/** Interface name prefixes of virtual devices whose addresses are not "the host's". */
export const VIRTUAL_PREFIXES = [
  'lo',
  'docker',
  'cbr',
  'virbr',
  'veth',
  'cali',
  'flannel',
  'kube-ipvs',
  'kube-bridge',
  'cni',
  'cilium',
  'lxc',
  'vxlan',
  'tunl',
  'weave',
  'nodelocaldns',
  'genev',
  'ipvl_',
  'tap',
  'vnet',
];

export function isVirtualInterface(name: string): boolean {
  return VIRTUAL_PREFIXES.some((p) => name.startsWith(p));
}

export interface HostIPs {
  v4: string[];
  v6: string[];
}

/**
 * Names of host links by index, each asked for once and only when needed: the few links that hold a
 * global address. A dump of every link cost a per-pod call time in proportion to the node's pods (one
 * host veth each).
 */
function linkNames(hostNs: Netns): (index: number) => Promise<string> {
  const names = new Map<number, Promise<string>>();
  return (index) => {
    let name = names.get(index);
    if (name === undefined) {
      name = link.find(hostNs, index).then((l) => l?.name ?? '');
      names.set(index, name);
    }
    return name;
  };
}

/** Host IPs for every family among `podIPs` (plain addresses, no prefix). */
export async function discoverHostIPs(hostNs: Netns, podIPs: string[]): Promise<HostIPs> {
  const out: HostIPs = { v4: [], v6: [] };
  const families = new Set(podIPs.map(familyOf));
  const nameOf = linkNames(hostNs);
  for (const family of families) {
    const list = family === 4 ? out.v4 : out.v6;
    const podIP = podIPs.find((p) => familyOf(p) === family)!;
    try {
      const r = await route.get(hostNs, podIP);
      if (r.src) list.push(r.src);
    } catch {
      // No route towards the pod: fall back to the addresses below.
    }
    for (const a of await addr.list(hostNs, { family })) {
      const plain = a.address.split('/')[0]!;
      // Global scope only: link-local and host-scoped addresses are not reachable from the pod.
      if (a.scope !== 0 || list.includes(plain) || isVirtualInterface(await nameOf(a.index))) continue;
      list.push(plain);
    }
    if (list.length === 0) {
      throw new CniError(
        CniCode.Internal,
        `no host IPv${family} address found`,
        `the pod has IPv${family} addresses but the host has none on a non-virtual interface`,
      );
    }
  }
  return out;
}
