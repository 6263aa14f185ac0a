/**
 * Host-side topologies built inside namespaces (the machine's own namespace is never touched).
 *
 *   macvlanNode():
 *
 *     [ext netns]                        [node netns]                                [pod netns]
 *     eth<i> 172.16.5<i>.1/24  <--veth--> uplink<i> 172.16.5<i>.2/24 (node IP)  <-- macvlan children
 *            fd00:16:5<i>::1/64                     fd00:16:5<i>::2/64              (made by the plugin)
 *                                        kube-ipvs0 (bridge, no ports) holding the "Service" addresses
 *                                          10.96.0.10/32, fd00:96::10/128  (Service CIDRs 10.96.0.0/16, fd00:96::/112)
 *
 *   The ext namespace plays the upstream router / an "external host" on the pods' L2 segment.
 *   A macvlan child cannot talk to its parent's own addresses (the node IP): that is the problem the
 *   `veth` plugin solves, and the reference tests show it as a negative control.
 *
 *   bridgeNode(): a node namespace (the bridge plugin creates the bridge) plus an ext namespace
 *   reached from the node over 192.168.77.0/24, for overlay-style pods.
 */
import { Netns } from './netns';

export interface Segment {
  /** macvlan parent in the node namespace */
  uplink: string;
  /** interface name on the ext side */
  extIf: string;
  subnet4: string;
  nodeIP4: string;
  extIP4: string;
  /** first and last pod address handed out by host-local */
  rangeStart4: string;
  rangeEnd4: string;
  subnet6: string;
  nodeIP6: string;
  extIP6: string;
  rangeStart6: string;
  rangeEnd6: string;
}

export interface MacvlanNode {
  node: Netns;
  ext: Netns;
  segments: Segment[];
  serviceIP4: string;
  serviceCidr4: string;
  serviceIP6: string;
  serviceCidr6: string;
  /** overlay CIDR the pods route via veth0 (no overlay exists; only the routes are checked) */
  overlayCidr4: string;
  overlayCidr6: string;
  destroy(): Promise<void>;
}

export function segment(i: number): Segment {
  const n = 50 + i;
  return {
    uplink: `uplink${i}`,
    extIf: `eth${i}`,
    subnet4: `172.16.${n}.0/24`,
    nodeIP4: `172.16.${n}.2`,
    extIP4: `172.16.${n}.1`,
    rangeStart4: `172.16.${n}.100`,
    rangeEnd4: `172.16.${n}.199`,
    subnet6: `fd00:16:${n}::/64`,
    nodeIP6: `fd00:16:${n}::2`,
    extIP6: `fd00:16:${n}::1`,
    rangeStart6: `fd00:16:${n}::100`,
    rangeEnd6: `fd00:16:${n}::1ff`,
  };
}

/** A node and an ext namespace, wired by `wire`; both are deleted again when `wire` fails. */
async function nodeAndExt(
  wire: (node: Netns, ext: Netns) => Promise<void>,
): Promise<{ node: Netns; ext: Netns; destroy(): Promise<void> }> {
  const node = await Netns.create('node');
  const ext = await Netns.create('ext');
  const destroy = async (): Promise<void> => {
    await ext.delete();
    await node.delete();
  };
  try {
    await wire(node, ext);
  } catch (e) {
    await destroy();
    throw e;
  }
  return { node, ext, destroy };
}

export async function macvlanNode(opts: { segments?: number; ipv6?: boolean } = {}): Promise<MacvlanNode> {
  const segments: Segment[] = [];
  const pair = await nodeAndExt(async (node, ext) => {
    for (let i = 0; i < (opts.segments ?? 1); i++) {
      const s = segment(i);
      segments.push(s);
      await node.ip('link', 'add', s.uplink, 'type', 'veth', 'peer', 'name', s.extIf, 'netns', ext.name);
      await node.ip('addr', 'add', `${s.nodeIP4}/24`, 'dev', s.uplink);
      await ext.ip('addr', 'add', `${s.extIP4}/24`, 'dev', s.extIf);
      if (opts.ipv6 !== false) {
        await node.ip('addr', 'add', `${s.nodeIP6}/64`, 'dev', s.uplink, 'nodad');
        await ext.ip('addr', 'add', `${s.extIP6}/64`, 'dev', s.extIf, 'nodad');
      }
      await node.ip('link', 'set', s.uplink, 'up');
      await ext.ip('link', 'set', s.extIf, 'up');
    }
    await node.ip('link', 'add', 'kube-ipvs0', 'type', 'bridge');
    await node.ip('link', 'set', 'kube-ipvs0', 'up');
    await node.ip('addr', 'add', '10.96.0.10/32', 'dev', 'kube-ipvs0');
    if (opts.ipv6 !== false) await node.ip('addr', 'add', 'fd00:96::10/128', 'dev', 'kube-ipvs0', 'nodad');
  });
  return {
    ...pair,
    segments,
    serviceIP4: '10.96.0.10',
    serviceCidr4: '10.96.0.0/16',
    serviceIP6: 'fd00:96::10',
    serviceCidr6: 'fd00:96::/112',
    overlayCidr4: '10.244.0.0/16',
    overlayCidr6: 'fd00:244::/56',
  };
}

export interface BridgeNode {
  node: Netns;
  ext: Netns;
  /** node <-> ext link */
  nodeUplinkIP4: string;
  extIP4: string;
  destroy(): Promise<void>;
}

export async function bridgeNode(): Promise<BridgeNode> {
  const pair = await nodeAndExt(async (node, ext) => {
    await node.ip('link', 'add', 'uplink0', 'type', 'veth', 'peer', 'name', 'eth0', 'netns', ext.name);
    await node.ip('addr', 'add', '192.168.77.2/24', 'dev', 'uplink0');
    await ext.ip('addr', 'add', '192.168.77.1/24', 'dev', 'eth0');
    await node.ip('link', 'set', 'uplink0', 'up');
    await ext.ip('link', 'set', 'eth0', 'up');
  });
  return { ...pair, nodeUplinkIP4: '192.168.77.2', extIP4: '192.168.77.1' };
}

/** Forwarding on in a namespace (node acting as a router between pods and ext). */
export async function enableForwarding(ns: Netns): Promise<void> {
  await ns.execOk(['sh', '-c', 'echo 1 > /proc/sys/net/ipv4/ip_forward && echo 1 > /proc/sys/net/ipv6/conf/all/forwarding']);
}

let bridgeCount = 0;
/**
 * A bridge in `ns` with `gatewayCidr` on it, as the bridge plugin would make it, created up front so
 * that before/after snapshots of the node show only what attachments leave (the plugin never
 * deletes its bridge). The MAC is set explicitly: a bridge otherwise takes the lowest MAC of its
 * ports, which changes as pods come and go and makes the bridge plugin's CHECK fail.
 */
export async function addBridge(ns: Netns, name: string, gatewayCidr: string): Promise<void> {
  const mac = `02:cb:00:00:${(++bridgeCount >> 8).toString(16).padStart(2, '0')}:${(bridgeCount & 0xff).toString(16).padStart(2, '0')}`;
  await ns.ip('link', 'add', name, 'address', mac, 'type', 'bridge');
  await ns.ip('addr', 'add', gatewayCidr, 'dev', name);
  await ns.ip('link', 'set', name, 'up');
}
