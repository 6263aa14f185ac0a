/** Shared by the veth e2e suites: the plugin's config for a macvlanNode() topology, and lookups. */
import { Conflist, describeWithPlugin, diffSnapshots, macvlanChain, MacvlanNode, NetSnapshot, Netns } from '../lib';

/** `describe` for the suites that need dist/bin/veth. */
export const describeVeth = describeWithPlugin('veth');

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

export interface VethChainOptions extends Omit<VethConfOptions, 'ipv4'> {
  name: string;
  /** host-local's dataDir */
  dataDir: string;
  /** which of the node's uplinks (default 0) */
  segment?: number;
  cniVersion?: string;
}

/** macvlan + host-local + veth on one uplink of `topo`: the chain the veth suites attach. */
export function vethChain(topo: MacvlanNode, o: VethChainOptions): Conflist {
  return macvlanChain({
    name: o.name,
    cniVersion: o.cniVersion,
    segment: topo.segments[o.segment ?? 0]!,
    dataDir: o.dataDir,
    ipv6: o.ipv6,
    veth: vethConf(topo, { ipv6: o.ipv6, logFile: o.logFile, extra: o.extra }),
  });
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
