/** Shared by the veth e2e suites: the plugin's config for a macvlanNode() topology, and lookups. */
import { diffSnapshots, MacvlanNode, NetSnapshot, Netns } from '../lib';

export interface VethConfOptions {
  ipv6?: boolean;
  ipv4?: boolean;
  logFile: string;
  extra?: Record<string, unknown>;
}

/** The `veth` plugin's config (seed 001 field names): hijack the overlay and Service CIDRs via veth0. */
export function vethConf(topo: MacvlanNode, o: VethConfOptions): Record<string, unknown> {
  const v4 = o.ipv4 !== false;
  return {
    overlay_hijack_subnet: [...(v4 ? [topo.overlayCidr4] : []), ...(o.ipv6 ? [topo.overlayCidr6] : [])],
    service_hijack_subnet: [...(v4 ? [topo.serviceCidr4] : []), ...(o.ipv6 ? [topo.serviceCidr6] : [])],
    log_options: { log_level: 'debug', log_file: o.logFile },
    ...o.extra,
  };
}

/** The host-side veth an ADD created: the one veth link that appeared in the node namespace. */
export function newHostVeths(before: NetSnapshot, after: NetSnapshot): string[] {
  return diffSnapshots(before, after)
    .filter((l) => l.startsWith('links: + ') && / kind veth\b/.test(l))
    .map((l) => l.slice('links: + '.length).split(' ')[0]!);
}

export async function macOf(ns: Netns, ifname: string): Promise<string> {
  const [l] = await ns.ipJson<{ address: string }>('link', 'show', 'dev', ifname);
  return l!.address;
}

export interface NeighEntry {
  dst: string;
  dev: string;
  lladdr?: string;
  state?: string[];
}

export async function neighOn(ns: Netns, dev: string): Promise<NeighEntry[]> {
  return ns.ipJson<NeighEntry>('neigh', 'show', 'dev', dev).then((l) => l.map((e) => ({ ...e, dev })));
}

/** Addresses of `dev` in `ns` (without prefix length), link-local left out. */
export async function addrsOf(ns: Netns, dev: string): Promise<string[]> {
  const [l] = await ns.ipJson<{ addr_info: { local: string; scope: string }[] }>('addr', 'show', 'dev', dev);
  return (l?.addr_info ?? []).filter((a) => a.scope !== 'link').map((a) => a.local);
}
