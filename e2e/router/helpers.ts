/**
 * Shared by the router e2e suites: a node with an "overlay" (Debian's bridge plugin on cni0, standing
 * in for calico/flannel) next to macvlanNode()'s uplink, and the two conflists a Multus pod would
 * get: the cluster network (eth0) and a secondary network (net1) = macvlan + host-local + router.
 *
 *   ext 172.16.50.1 ── uplink0 172.16.50.2 (node IP, macvlan parent)      node netns, forwarding on
 *                      cni0 10.244.0.1/24 (fd00:244::1/64) ── pods' eth0 (bridge plugin)
 *                      kube-ipvs0: 10.96.0.10, fd00:96::10 (Services)
 */
import {
  addBridge,
  Conflist,
  describeWithPlugin,
  enableForwarding,
  hostLocalOn,
  macvlanNode,
  MacvlanNode,
  macvlanPlugin,
  Netns,
  Segment,
} from '../lib';

/** `describe` for the suites that need dist/bin/router. */
export const describeRouter = describeWithPlugin('router');

export const OVERLAY_CIDR4 = '10.244.0.0/24';
export const OVERLAY_GW4 = '10.244.0.1';
export const OVERLAY_CIDR6 = 'fd00:244::/64';
export const OVERLAY_GW6 = 'fd00:244::1';

export async function routerNode(opts: { ipv6?: boolean; segments?: number } = {}): Promise<MacvlanNode> {
  const topo = await macvlanNode({ ipv6: opts.ipv6 ?? false, segments: opts.segments ?? 1 });
  await addBridge(topo.node, 'cni0', `${OVERLAY_GW4}/24`);
  if (opts.ipv6) await topo.node.ip('addr', 'add', `${OVERLAY_GW6}/64`, 'dev', 'cni0', 'nodad');
  await enableForwarding(topo.node);
  return topo;
}

/** The cluster network: bridge + host-local on cni0, default route via the bridge. */
export function overlayConflist(name: string, dataDir: string, o: { ipv6?: boolean; cniVersion?: string } = {}): Conflist {
  const ranges: unknown[] = [[{ subnet: OVERLAY_CIDR4, gateway: OVERLAY_GW4 }]];
  const routes: unknown[] = [{ dst: '0.0.0.0/0' }];
  if (o.ipv6) {
    ranges.push([{ subnet: OVERLAY_CIDR6, gateway: OVERLAY_GW6 }]);
    routes.push({ dst: '::/0' });
  }
  return {
    cniVersion: o.cniVersion ?? '1.0.0',
    name,
    plugins: [{ type: 'bridge', bridge: 'cni0', isGateway: true, ipMasq: false, ipam: { type: 'host-local', ranges, routes, dataDir } }],
  };
}

/** router's own fields for this topology. */
export function routerFields(
  topo: MacvlanNode,
  logFile: string,
  o: { ipv6?: boolean; extra?: Record<string, unknown> } = {},
): Record<string, unknown> {
  return {
    overlay_hijack_subnet: ['10.244.0.0/16', ...(o.ipv6 ? ['fd00:244::/56'] : [])],
    service_hijack_subnet: [topo.serviceCidr4, ...(o.ipv6 ? [topo.serviceCidr6] : [])],
    log_options: { log_level: 'debug', log_file: logFile },
    ...o.extra,
  };
}

/** The secondary network: macvlan + host-local (default route via ext) + router. */
export function routerChain(
  name: string,
  topo: MacvlanNode,
  segment: Segment,
  dataDir: string,
  logFile: string,
  o: { ipv6?: boolean; cniVersion?: string; extra?: Record<string, unknown> } = {},
): Conflist {
  return {
    cniVersion: o.cniVersion ?? '1.0.0',
    name,
    plugins: [
      macvlanPlugin(segment, hostLocalOn(segment, { dataDir, ipv6: o.ipv6 })),
      { type: 'router', ...routerFields(topo, logFile, o) },
    ],
  };
}

/** Global addresses of `dev` from `ip -j addr` output, without prefix. */
export function globalAddrs(
  json: { addr_info?: { local: string; scope: string; family: string }[] }[],
  family?: 'inet' | 'inet6',
): string[] {
  return (json[0]?.addr_info ?? []).filter((a) => a.scope === 'global' && (!family || a.family === family)).map((a) => a.local);
}

export interface MultusPodOptions {
  /** a short word for the host-side names (veth<name>, mv<name>) */
  name: string;
  /** eth0's address on the overlay (10.244.0.0/24) */
  overlayIP: string;
  /** net1's MAC and address on the node's first segment (/24) */
  mac: string;
  net1IP: string;
}

/**
 * What the cluster network (bridge plugin) and macvlan leave in a pod before router runs: eth0 on cni0
 * with the default route through the bridge, and net1, a macvlan child of the node's first uplink.
 */
export async function multusPod(topo: MacvlanNode, pod: Netns, o: MultusPodOptions): Promise<void> {
  const hostVeth = `veth${o.name}`;
  const macvlan = `mv${o.name}`;
  await topo.node.ip('link', 'add', hostVeth, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', pod.name);
  await topo.node.ip('link', 'set', hostVeth, 'master', 'cni0', 'up');
  await pod.ip('addr', 'add', `${o.overlayIP}/24`, 'dev', 'eth0');
  await pod.ip('link', 'set', 'eth0', 'up');
  await pod.ip('route', 'add', 'default', 'via', OVERLAY_GW4, 'dev', 'eth0');
  const uplink = topo.segments[0]!.uplink;
  await topo.node.ip('link', 'add', macvlan, 'link', uplink, 'address', o.mac, 'type', 'macvlan', 'mode', 'bridge');
  await topo.node.ip('link', 'set', macvlan, 'netns', pod.name);
  await pod.ip('link', 'set', macvlan, 'name', 'net1');
  await pod.ip('addr', 'add', `${o.net1IP}/24`, 'dev', 'net1');
  await pod.ip('link', 'set', 'net1', 'up');
}
