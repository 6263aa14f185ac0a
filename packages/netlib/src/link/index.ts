/**
 * Network links: look up, create (veth, ifb, bridge, dummy, macvlan), change, move, delete.
 *
 * Lookups by name send a targeted RTM_GETLINK with IFLA_IFNAME (one small reply)
 * rather than dumping every link; changes by name let the kernel resolve the name
 * inside the same request. Statistics are masked out of every reply.
 */
import { LinkNotFoundError, NetlinkError } from '../errors';
import { attr, nest, str, u32 } from '../nl/attrs';
import { parseMac } from '../nl/inet';
import { dump, NLM_F, request, type What } from '../nl/request';
import { RTM } from '../nl/rtm';
import type { Netns } from '../netns/handle';
import {
  IFF_UP,
  IFLA,
  IFLA_INFO_DATA,
  IFLA_INFO_KIND,
  IFLA_MACVLAN_MODE,
  RTEXT_FILTER_SKIP_STATS,
  VETH_INFO_PEER,
  ifinfomsg,
  parseLink,
  type Link,
} from './wire';

export type { Link } from './wire';

/** A link named by interface name or by index. */
export type LinkRef = string | number;

const describe = (l: LinkRef): string => (typeof l === 'number' ? `index ${l}` : l);
const skipStats = (): Buffer => attr(IFLA.EXT_MASK, u32(RTEXT_FILTER_SKIP_STATS));

/** ifinfomsg + IFLA_IFNAME when `l` is a name, so the kernel resolves it itself. */
function select(l: LinkRef, flags = 0, change = 0): Buffer[] {
  if (typeof l === 'number') return [ifinfomsg(l, flags, change)];
  return [ifinfomsg(0, flags, change), attr(IFLA.IFNAME, str(l))];
}

/** Every link in the namespace. */
export async function list(ns: Netns): Promise<Link[]> {
  const replies = await dump(ns, RTM.GETLINK, Buffer.concat([ifinfomsg(), skipStats()]), { op: 'list links', object: `in ${ns.path}` });
  return replies.filter((r) => r.type === RTM.NEWLINK).map((r) => parseLink(r.data));
}

/** The link with this name or index; LinkNotFoundError when there is none. */
export async function get(ns: Netns, l: LinkRef): Promise<Link> {
  try {
    const [reply] = await request(ns, RTM.GETLINK, 0, Buffer.concat([...select(l), skipStats()]), { op: 'find link', object: describe(l) });
    if (!reply) throw new LinkNotFoundError(describe(l));
    return parseLink(reply.data);
  } catch (err) {
    if (err instanceof NetlinkError && !(err instanceof LinkNotFoundError) && err.errno === 'ENODEV')
      throw new LinkNotFoundError(describe(l), { cause: err });
    throw err;
  }
}

/** Like get(), but undefined when the link does not exist. */
export async function find(ns: Netns, l: LinkRef): Promise<Link | undefined> {
  try {
    return await get(ns, l);
  } catch (err) {
    if (err instanceof LinkNotFoundError) return undefined;
    throw err;
  }
}

/** The first link whose alias (IFLA_IFALIAS) is exactly `alias`; the kernel cannot filter on it, so this dumps. */
export async function findByAlias(ns: Netns, alias: string): Promise<Link | undefined> {
  return (await list(ns)).find((l) => l.alias === alias);
}

export interface VethOptions {
  name: string;
  peerName: string;
  /** Namespace for the peer; default: the same as the first end. */
  peerNs?: Netns;
  /** MTU of both ends. */
  mtu?: number;
  mac?: string;
  peerMac?: string;
}

/**
 * Creates a veth pair in one request: `name` in `ns`, `peerName` placed directly in
 * `peerNs` (VETH_INFO_PEER carrying IFLA_NET_NS_FD), so the peer never appears in
 * `ns` under a name that could collide. EEXIST when either name is taken.
 */
export async function addVeth(ns: Netns, o: VethOptions): Promise<{ link: Link; peer: Link }> {
  const what: What = { op: 'add link', object: `${o.name} type veth peer ${o.peerName}${o.peerNs ? ` netns ${o.peerNs.path}` : ''}` };
  // VETH_INFO_PEER: a struct ifinfomsg followed by the peer's own attributes.
  const peerInfo = [ifinfomsg(), attr(IFLA.IFNAME, str(o.peerName))];
  if (o.peerNs) peerInfo.push(attr(IFLA.NET_NS_FD, u32(o.peerNs.fd)));
  if (o.mtu !== undefined) peerInfo.push(attr(IFLA.MTU, u32(o.mtu)));
  if (o.peerMac !== undefined) peerInfo.push(attr(IFLA.ADDRESS, parseMac(o.peerMac)));
  const body = [ifinfomsg(), attr(IFLA.IFNAME, str(o.name))];
  if (o.mtu !== undefined) body.push(attr(IFLA.MTU, u32(o.mtu)));
  if (o.mac !== undefined) body.push(attr(IFLA.ADDRESS, parseMac(o.mac)));
  body.push(nest(IFLA.LINKINFO, attr(IFLA_INFO_KIND, str('veth')), nest(IFLA_INFO_DATA, attr(VETH_INFO_PEER, peerInfo))));
  await request(ns, RTM.NEWLINK, NLM_F.CREATE | NLM_F.EXCL, Buffer.concat(body), what);
  const [link, peer] = await Promise.all([get(ns, o.name), get(o.peerNs ?? ns, o.peerName)]);
  return { link, peer };
}

export type MacvlanMode = 'private' | 'vepa' | 'bridge' | 'passthru' | 'source';
const MACVLAN_MODES: Record<MacvlanMode, number> = { private: 1, vepa: 2, bridge: 4, passthru: 8, source: 16 };

export interface AddOptions {
  name: string;
  kind: 'ifb' | 'bridge' | 'dummy' | 'macvlan';
  /** macvlan: index of the parent device (in `ns`). */
  parentIndex?: number;
  /** macvlan mode (default "bridge"). */
  mode?: MacvlanMode;
  mtu?: number;
  mac?: string;
  /** Create the link directly in this namespace (IFLA_NET_NS_FD), e.g. a macvlan for a container. */
  targetNs?: Netns;
}

/** Creates a link of a simple kind; EEXIST when the name is taken. Returns it as read back from its namespace. */
export async function add(ns: Netns, o: AddOptions): Promise<Link> {
  const body = [ifinfomsg(), attr(IFLA.IFNAME, str(o.name))];
  if (o.mtu !== undefined) body.push(attr(IFLA.MTU, u32(o.mtu)));
  if (o.mac !== undefined) body.push(attr(IFLA.ADDRESS, parseMac(o.mac)));
  if (o.parentIndex !== undefined) body.push(attr(IFLA.LINK, u32(o.parentIndex)));
  if (o.targetNs) body.push(attr(IFLA.NET_NS_FD, u32(o.targetNs.fd)));
  const info = [attr(IFLA_INFO_KIND, str(o.kind))];
  if (o.kind === 'macvlan') {
    const mode = MACVLAN_MODES[o.mode ?? 'bridge'];
    if (mode === undefined) throw new TypeError(`unknown macvlan mode ${JSON.stringify(o.mode)}`);
    info.push(nest(IFLA_INFO_DATA, attr(IFLA_MACVLAN_MODE, u32(mode))));
  }
  body.push(nest(IFLA.LINKINFO, ...info));
  await request(ns, RTM.NEWLINK, NLM_F.CREATE | NLM_F.EXCL, Buffer.concat(body), { op: 'add link', object: `${o.name} type ${o.kind}` });
  return get(o.targetNs ?? ns, o.name);
}

/** RTM_NEWLINK on an existing link (no CREATE): ENODEV when it does not exist. */
async function change(ns: Netns, head: Buffer[], attrs: Buffer[], object: string): Promise<void> {
  await request(ns, RTM.NEWLINK, 0, Buffer.concat([...head, ...attrs]), { op: 'set link', object });
}

export const setUp = (ns: Netns, l: LinkRef): Promise<void> => change(ns, select(l, IFF_UP, IFF_UP), [], `${describe(l)} up`);
export const setDown = (ns: Netns, l: LinkRef): Promise<void> => change(ns, select(l, 0, IFF_UP), [], `${describe(l)} down`);

export const setMtu = (ns: Netns, l: LinkRef, mtu: number): Promise<void> =>
  change(ns, select(l), [attr(IFLA.MTU, u32(mtu))], `${describe(l)} mtu ${mtu}`);

/** Sets the hardware address; a malformed `mac` rejects with a TypeError (nothing is sent). */
export async function setMac(ns: Netns, l: LinkRef, mac: string): Promise<void> {
  await change(ns, select(l), [attr(IFLA.ADDRESS, parseMac(mac))], `${describe(l)} address ${mac}`);
}

/** Sets IFLA_IFALIAS; an empty string removes the alias. */
export const setAlias = (ns: Netns, l: LinkRef, alias: string): Promise<void> =>
  // No trailing NUL: an empty payload is how the kernel is told to drop the alias.
  change(ns, select(l), [attr(IFLA.IFALIAS, Buffer.from(alias, 'utf8'))], `${describe(l)} alias ${JSON.stringify(alias)}`);

/** Renames a link. Kernels before 6.2 refuse (EBUSY) while it is up. */
export async function rename(ns: Netns, l: LinkRef, newName: string): Promise<void> {
  // IFLA_IFNAME carries the new name here, so the link must be selected by index.
  const index = typeof l === 'number' ? l : (await get(ns, l)).index;
  await change(ns, [ifinfomsg(index)], [attr(IFLA.IFNAME, str(newName))], `${describe(l)} name ${newName}`);
}

/** Enslaves a link to a bridge (or other master); 0 releases it. */
export const setMaster = (ns: Netns, l: LinkRef, masterIndex: number): Promise<void> =>
  change(ns, select(l), [attr(IFLA.MASTER, u32(masterIndex))], `${describe(l)} master ${masterIndex ? `index ${masterIndex}` : 'none'}`);

/** Moves a link into another namespace; it keeps its name, which must be free there. */
export const moveToNetns = (ns: Netns, l: LinkRef, target: Netns): Promise<void> =>
  change(ns, select(l), [attr(IFLA.NET_NS_FD, u32(target.fd))], `${describe(l)} netns ${target.path}`);

/** Deletes a link (and, for a veth, its peer); NetlinkError ENODEV when it does not exist. */
export async function del(ns: Netns, l: LinkRef): Promise<void> {
  await request(ns, RTM.DELLINK, 0, Buffer.concat(select(l)), { op: 'del link', object: describe(l) });
}
