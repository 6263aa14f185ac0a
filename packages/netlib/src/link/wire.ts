/**
 * struct ifinfomsg and the IFLA_* attributes netlib reads and writes, plus the
 * decoding of a link message into the public Link shape.
 */
import { attrList, parseAttrs, readS32, readStr, readU32, writeS32, writeU16, writeU32 } from '../nl/attrs';
import { formatMac } from '../nl/inet';

export const IFLA = {
  ADDRESS: 1,
  IFNAME: 3,
  MTU: 4,
  LINK: 5,
  MASTER: 10,
  OPERSTATE: 16,
  LINKINFO: 18,
  IFALIAS: 20,
  NET_NS_FD: 28,
  EXT_MASK: 29,
  LINK_NETNSID: 37,
} as const;

export const IFLA_INFO_KIND = 1;
export const IFLA_INFO_DATA = 2;
export const VETH_INFO_PEER = 1;
export const IFLA_MACVLAN_MODE = 1;
export const IFF_UP = 0x1;
/** IFLA_EXT_MASK bit: leave statistics out of replies (most of a link message's size). */
export const RTEXT_FILTER_SKIP_STATS = 1 << 3;

const IFINFOMSG_LEN = 16;

/** struct ifinfomsg { u8 family; u8 pad; u16 type; s32 index; u32 flags; u32 change; } */
export function ifinfomsg(index = 0, flags = 0, change = 0): Buffer {
  const b = Buffer.alloc(IFINFOMSG_LEN);
  writeU16(b, 0, 2);
  writeS32(b, index, 4);
  writeU32(b, flags, 8);
  writeU32(b, change, 12);
  return b;
}

export interface Link {
  index: number;
  name: string;
  /** IFLA_INFO_KIND: "veth", "bridge", "ifb"...; absent for physical devices and lo. */
  kind?: string;
  mtu: number;
  /** Hardware address as aa:bb:cc:dd:ee:ff ("" when the device has none). */
  mac: string;
  /** Administratively up (IFF_UP). */
  up: boolean;
  alias?: string;
  masterIndex?: number;
  /** IFLA_LINK: the peer of a veth, the parent of a macvlan (index in linkNetnsId's namespace when that is set). */
  peerIndex?: number;
  /** Namespace id (as seen from this namespace) where peerIndex lives. */
  linkNetnsId?: number;
  /** RFC 2863 operational state: "up", "down", "lowerlayerdown", "unknown"... */
  operState?: string;
}

const OPER_STATES = ['unknown', 'notpresent', 'down', 'lowerlayerdown', 'testing', 'dormant', 'up'];

export function parseLink(data: Buffer): Link {
  const index = readS32(data, 4);
  const flags = readU32(data, 8);
  const a = parseAttrs(data, IFINFOMSG_LEN);
  const link: Link = {
    index,
    name: readStr(a.get(IFLA.IFNAME) ?? Buffer.alloc(0)),
    mtu: a.has(IFLA.MTU) ? readU32(a.get(IFLA.MTU)!) : 0,
    mac: a.has(IFLA.ADDRESS) ? formatMac(a.get(IFLA.ADDRESS)!) : '',
    up: (flags & IFF_UP) !== 0,
  };
  const info = a.get(IFLA.LINKINFO);
  if (info) {
    const kind = attrList(info).find(([t]) => t === IFLA_INFO_KIND);
    if (kind) link.kind = readStr(kind[1]);
  }
  const alias = a.get(IFLA.IFALIAS);
  if (alias && alias.length && alias[0] !== 0) link.alias = readStr(alias);
  const master = a.get(IFLA.MASTER);
  if (master) link.masterIndex = readU32(master);
  const peer = a.get(IFLA.LINK);
  if (peer) link.peerIndex = readS32(peer);
  const nsid = a.get(IFLA.LINK_NETNSID);
  if (nsid) link.linkNetnsId = readS32(nsid);
  const oper = a.get(IFLA.OPERSTATE);
  if (oper) link.operState = OPER_STATES[oper[0]!] ?? String(oper[0]);
  return link;
}
