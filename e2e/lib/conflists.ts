/** Conflists the e2e tests share: Debian's reference plugins, optionally chained with ours. */
import { Conflist } from './cni';
import { Segment } from './topology';

export interface HostLocalOptions {
  dataDir: string;
  ipv4?: boolean;
  ipv6?: boolean;
  /** add default routes via the segment's ext host (the pod's main NIC) */
  defaultRoute?: boolean;
}

/** host-local IPAM on one of macvlanNode()'s segments. */
export function hostLocalOn(s: Segment, o: HostLocalOptions): Record<string, unknown> {
  const ranges: unknown[] = [];
  const routes: unknown[] = [];
  if (o.ipv4 !== false) {
    ranges.push([{ subnet: s.subnet4, rangeStart: s.rangeStart4, rangeEnd: s.rangeEnd4, gateway: s.extIP4 }]);
    if (o.defaultRoute !== false) routes.push({ dst: '0.0.0.0/0' });
  }
  if (o.ipv6) {
    ranges.push([{ subnet: s.subnet6, rangeStart: s.rangeStart6, rangeEnd: s.rangeEnd6, gateway: s.extIP6 }]);
    if (o.defaultRoute !== false) routes.push({ dst: '::/0' });
  }
  return { type: 'host-local', ranges, routes, dataDir: o.dataDir };
}

export function macvlanPlugin(s: Segment, ipam: Record<string, unknown>): Record<string, unknown> {
  return { type: 'macvlan', master: s.uplink, mode: 'bridge', ipam };
}

export interface ChainOptions extends HostLocalOptions {
  name: string;
  cniVersion?: string;
  segment: Segment;
  /** the `veth` plugin's config (fields of the seed); omit to get macvlan + host-local alone */
  veth?: Record<string, unknown>;
}

/** macvlan + host-local [+ veth] */
export function macvlanChain(o: ChainOptions): Conflist {
  const plugins: Record<string, unknown>[] = [macvlanPlugin(o.segment, hostLocalOn(o.segment, o))];
  if (o.veth) plugins.push({ type: 'veth', ...o.veth });
  return { cniVersion: o.cniVersion ?? '1.0.0', name: o.name, plugins };
}

/** bridge + host-local on `bridge` with `subnet` (gateway .1 on the bridge, in the node namespace). */
export function bridgeChain(o: {
  name: string;
  bridge: string;
  subnet: string;
  dataDir: string;
  cniVersion?: string;
  defaultRoute?: boolean;
}): Conflist {
  return {
    cniVersion: o.cniVersion ?? '1.0.0',
    name: o.name,
    plugins: [
      {
        type: 'bridge',
        bridge: o.bridge,
        isGateway: true,
        ipMasq: false,
        ipam: {
          type: 'host-local',
          ranges: [[{ subnet: o.subnet }]],
          routes: o.defaultRoute === false ? [] : [{ dst: '0.0.0.0/0' }],
          dataDir: o.dataDir,
        },
      },
    ],
  };
}

/** Gateway (.1) of an IPv4 /24 written as a.b.c.0/24. */
export const gatewayOf = (subnet: string): string => subnet.replace(/\.0\/\d+$/, '.1');
