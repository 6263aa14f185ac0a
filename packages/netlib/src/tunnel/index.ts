/**
 * Links of the kinds a stock distribution kernel has but this project's host kernel lacks:
 * ipvlan (Terway's ENI multi-IP datapath), ipip and ip6tnl with Foo-over-UDP / GUE
 * encapsulation (Coil's egress NAT), dummy. Tested in the kernel lab (e2e/kernel-lab).
 *
 * Each add sends one RTM_NEWLINK with CREATE|EXCL (EEXIST when the name is taken) and
 * returns the link as read back from the namespace it ended in; with `targetNs` the link is
 * created directly there (IFLA_NET_NS_FD), while parent / underlying indexes stay indexes
 * in `ns`. Changing, moving and deleting these links is link.* as for any other kind.
 */
import { attr, attrList, nest, parseAttrs, readStr, str, u32 } from '../nl/attrs';
import { parseMac } from '../nl/inet';
import { NLM_F, request } from '../nl/request';
import { RTM } from '../nl/rtm';
import { LinkNotFoundError, NetlinkError } from '../errors';
import { get, type Link, type LinkRef } from '../link';
import { IFLA, IFLA_INFO_DATA, IFLA_INFO_KIND, RTEXT_FILTER_SKIP_STATS, ifinfomsg, parseLink } from '../link/wire';
import type { Netns } from '../netns/handle';
import {
  ip6tnlData,
  ipipData,
  ipvlanData,
  parseIpvlanData,
  parseTunnelData,
  type IpipOptions,
  type Ip6tnlOptions,
  type IpvlanFlag,
  type IpvlanInfo,
  type IpvlanMode,
  type TunnelInfo,
} from './wire';

export type {
  Encap,
  EncapType,
  IpipOptions,
  Ip6tnlOptions,
  Ip6tnlProto,
  IpTunnelOptions,
  IpvlanFlag,
  IpvlanInfo,
  IpvlanMode,
  TunnelInfo,
} from './wire';

/** Attributes every kind shares: name, MTU, MAC, parent (IFLA_LINK), target namespace. */
interface Base {
  name: string;
  mtu?: number;
  mac?: string;
  targetNs?: Netns;
}

async function create(ns: Netns, kind: string, o: Base, data: Buffer[] | undefined, extra: Buffer[], object: string): Promise<Link> {
  const body = [ifinfomsg(), attr(IFLA.IFNAME, str(o.name))];
  if (o.mtu !== undefined) body.push(attr(IFLA.MTU, u32(o.mtu)));
  if (o.mac !== undefined) body.push(attr(IFLA.ADDRESS, parseMac(o.mac)));
  body.push(...extra);
  if (o.targetNs) body.push(attr(IFLA.NET_NS_FD, u32(o.targetNs.fd)));
  const info = [attr(IFLA_INFO_KIND, str(kind))];
  if (data) info.push(nest(IFLA_INFO_DATA, ...data));
  body.push(nest(IFLA.LINKINFO, ...info));
  const where = o.targetNs ? ` netns ${o.targetNs.path}` : '';
  await request(ns, RTM.NEWLINK, NLM_F.CREATE | NLM_F.EXCL, Buffer.concat(body), { op: 'add link', object: `${object}${where}` });
  return get(o.targetNs ?? ns, o.name);
}

export interface IpvlanOptions extends Base {
  /** Index (in `ns`) of the master device, e.g. an ENI. */
  parentIndex: number;
  /** Default "l2". */
  mode?: IpvlanMode;
  /** Default "bridge" (slaves of one master reach each other directly). */
  flag?: IpvlanFlag;
}

/**
 * Creates an ipvlan slave of `parentIndex`, in `targetNs` when given (how a pod gets its
 * interface). The slave shares the master's MAC; `mac` is refused by the kernel.
 * Mode and flag belong to the master (the kernel's ipvlan "port"), not to the slave: a slave
 * added with another mode switches every slave of that master to it.
 */
export function addIpvlan(ns: Netns, o: IpvlanOptions): Promise<Link> {
  const mode = o.mode ?? 'l2';
  return create(
    ns,
    'ipvlan',
    o,
    ipvlanData(mode, o.flag),
    [attr(IFLA.LINK, u32(o.parentIndex))],
    `${o.name} link index ${o.parentIndex} type ipvlan mode ${mode}`,
  );
}

const describeTunnel = (kind: string, o: IpipOptions | Ip6tnlOptions): string => {
  let s = `${o.name} type ${kind}`;
  if (o.external) s += ' external';
  if (o.remote) s += ` remote ${o.remote}`;
  if (o.local) s += ` local ${o.local}`;
  if (o.encap) s += ` encap ${o.encap.type} encap-sport ${o.encap.sport ? o.encap.sport : 'auto'} encap-dport ${o.encap.dport}`;
  return s;
};

/**
 * Creates an IPv4-in-IPv4 tunnel. With `encap: { type: 'fou', dport, sport: 0 }` its outer
 * packets are UDP to the peer's FoU port with a per-flow source port (`encap-sport auto`);
 * the peer decapsulates them with a FoU port for IP protocol 4 (fou.add).
 */
export function addIpip(ns: Netns, o: IpipOptions & Base): Promise<Link> {
  return create(ns, 'ipip', o, ipipData(o), [], describeTunnel('ipip', o));
}

/** Creates an IPv6 tunnel (ip6tnl) carrying IPv4 and/or IPv6 (`proto`), optionally FoU/GUE-encapsulated. */
export function addIp6tnl(ns: Netns, o: Ip6tnlOptions & Base): Promise<Link> {
  return create(ns, 'ip6tnl', o, ip6tnlData(o), [], describeTunnel('ip6tnl', o));
}

/**
 * Changes an existing tunnel in place (RTM_NEWLINK on its name without CREATE: the kernel's
 * changelink), keeping its index, addresses and the routes through it; a route-less gap is what
 * delete-and-create would cost. Every tunnel parameter is sent: the kernel resets those left out.
 * `kind` must be the link's kind; flow-based (`external`) links are not for this, and
 * endpoints another tunnel already has are EEXIST. LinkNotFoundError when absent.
 */
async function change(ns: Netns, kind: 'ipip' | 'ip6tnl', o: { name: string }, data: Buffer[], object: string): Promise<Link> {
  const body = [
    ifinfomsg(),
    attr(IFLA.IFNAME, str(o.name)),
    nest(IFLA.LINKINFO, attr(IFLA_INFO_KIND, str(kind)), nest(IFLA_INFO_DATA, ...data)),
  ];
  try {
    await request(ns, RTM.NEWLINK, 0, Buffer.concat(body), { op: 'change link', object });
  } catch (err) {
    if (err instanceof NetlinkError && err.errno === 'ENODEV') throw new LinkNotFoundError(o.name, { cause: err });
    throw err;
  }
  return get(ns, o.name);
}

/** Changes an existing ipip link's parameters (e.g. its encap source port) in place; see `change`. */
export function changeIpip(ns: Netns, o: IpipOptions): Promise<Link> {
  return change(ns, 'ipip', o, ipipData(o), describeTunnel('ipip', o));
}

/** Changes an existing ip6tnl link's parameters in place; see changeIpip. */
export function changeIp6tnl(ns: Netns, o: Ip6tnlOptions): Promise<Link> {
  return change(ns, 'ip6tnl', o, ip6tnlData(o), describeTunnel('ip6tnl', o));
}

/** Creates a dummy link (a local sink for addresses and routes). */
export function addDummy(ns: Netns, o: Base): Promise<Link> {
  return create(ns, 'dummy', o, undefined, [], `${o.name} type dummy`);
}

/** sizeof(struct ifinfomsg): link attributes start after it. */
const IFINFOMSG_LEN = 16;

/** A link with the kind-specific data this module knows how to read. */
export interface LinkDetails extends Link {
  ipvlan?: IpvlanInfo;
  /** ipip / ip6tnl. */
  tunnel?: TunnelInfo;
}

/**
 * Reads a link with its IFLA_INFO_DATA decoded for ipvlan, ipip and ip6tnl (what
 * `ip -d link show` prints). LinkNotFoundError when absent.
 */
export async function details(ns: Netns, l: LinkRef): Promise<LinkDetails> {
  const object = typeof l === 'number' ? `index ${l}` : l;
  const head = typeof l === 'number' ? [ifinfomsg(l)] : [ifinfomsg(), attr(IFLA.IFNAME, str(l))];
  let replies;
  try {
    replies = await request(ns, RTM.GETLINK, 0, Buffer.concat([...head, attr(IFLA.EXT_MASK, u32(RTEXT_FILTER_SKIP_STATS))]), {
      op: 'find link',
      object,
    });
  } catch (err) {
    if (err instanceof NetlinkError && err.errno === 'ENODEV') throw new LinkNotFoundError(object, { cause: err });
    throw err;
  }
  const reply = replies[0];
  if (!reply) throw new LinkNotFoundError(object);
  const out: LinkDetails = parseLink(reply.data);
  const linkinfo = parseAttrs(reply.data, IFINFOMSG_LEN).get(IFLA.LINKINFO);
  const data = linkinfo && attrList(linkinfo).find(([t]) => t === IFLA_INFO_DATA)?.[1];
  const kind = linkinfo && attrList(linkinfo).find(([t]) => t === IFLA_INFO_KIND)?.[1];
  if (data && kind) {
    const k = readStr(kind);
    if (k === 'ipvlan') out.ipvlan = parseIpvlanData(data);
    else if (k === 'ipip' || k === 'ip6tnl') out.tunnel = parseTunnelData(data);
  }
  return out;
}
