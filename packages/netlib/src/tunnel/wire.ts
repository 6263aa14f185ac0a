/**
 * IFLA_INFO_DATA of the link kinds in tunnel/: ipvlan (linux/if_link.h IFLA_IPVLAN_*) and the
 * IP tunnels ipip / ip6tnl (linux/if_tunnel.h IFLA_IPTUN_*), with their encapsulation
 * (TUNNEL_ENCAP_FOU / GUE), both ways: options -> attributes and attributes -> TunnelInfo.
 * Pure functions, no socket: the encoding tests run without a kernel that has these drivers.
 */
import { attr, parseAttrs, readU16, readU32, u16, u32, u8 } from '../nl/attrs';
import { formatIp, parseIp, type Family } from '../nl/inet';

export const IFLA_IPVLAN_MODE = 1;
export const IFLA_IPVLAN_FLAGS = 2;

export type IpvlanMode = 'l2' | 'l3' | 'l3s';
export const IPVLAN_MODES: Record<IpvlanMode, number> = { l2: 0, l3: 1, l3s: 2 };
/** Port flags: "bridge" is the default (no flag), "private" and "vepa" are exclusive. */
export type IpvlanFlag = 'bridge' | 'private' | 'vepa';
export const IPVLAN_FLAGS: Record<IpvlanFlag, number> = { bridge: 0, private: 1, vepa: 2 };

export const IFLA_IPTUN = {
  LINK: 1,
  LOCAL: 2,
  REMOTE: 3,
  TTL: 4,
  TOS: 5,
  ENCAP_LIMIT: 6,
  FLOWINFO: 7,
  FLAGS: 8,
  PROTO: 9,
  PMTUDISC: 10,
  ENCAP_TYPE: 15,
  ENCAP_FLAGS: 16,
  ENCAP_SPORT: 17,
  ENCAP_DPORT: 18,
  COLLECT_METADATA: 19,
  FWMARK: 20,
} as const;

export type EncapType = 'none' | 'fou' | 'gue';
export const TUNNEL_ENCAP: Record<EncapType, number> = { none: 0, fou: 1, gue: 2 };
export const TUNNEL_ENCAP_FLAG = { CSUM: 1, CSUM6: 2, REMCSUM: 4 } as const;

/** ip6tnl flags (linux/ip6_tunnel.h). */
export const IP6_TNL_F_IGN_ENCAP_LIMIT = 0x1;
/** The kernel's and iproute2's default encapsulation limit for ip6tnl. */
export const IPV6_DEFAULT_TNL_ENCAP_LIMIT = 4;

export const IPPROTO = { IPIP: 4, IPV6: 41 } as const;
/** ip6tnl inner protocol: `ipip6` (IPv4 inside), `ip6ip6`, or `any` (both; the kernel's 0). */
export type Ip6tnlProto = 'ipip6' | 'ip6ip6' | 'any';
const IP6TNL_PROTOS: Record<Ip6tnlProto, number> = { ipip6: IPPROTO.IPIP, ip6ip6: IPPROTO.IPV6, any: 0 };

/** UDP encapsulation of a tunnel (Foo-over-UDP or GUE): the receiver needs a FoU port (fou.add). */
export interface Encap {
  type: 'fou' | 'gue';
  /** UDP destination port: the peer's FoU listening port. */
  dport: number;
  /** UDP source port; 0 or absent = chosen per flow by the kernel (`encap-sport auto`). */
  sport?: number;
  /** UDP checksum over IPv4 (`encap-csum`), over IPv6 (`encap-csum6`), remote checksum offload. */
  csum?: boolean;
  csum6?: boolean;
  remcsum?: boolean;
}

export interface IpTunnelOptions {
  /** Interface name. */
  name: string;
  /** Peer outer address; absent for a tunnel that accepts any peer (or with `external`). */
  remote?: string;
  /** Local outer address. */
  local?: string;
  /** Outer TTL / hop limit; 0 or absent = inherit from the inner packet. */
  ttl?: number;
  /** Underlying device (IFLA_IPTUN_LINK): outer packets leave through it. */
  linkIndex?: number;
  encap?: Encap;
  /** Flow-based (`external`, IFLA_IPTUN_COLLECT_METADATA): endpoints come per packet (lwtunnel / bpf). */
  external?: boolean;
  fwmark?: number;
  mtu?: number;
}

export interface IpipOptions extends IpTunnelOptions {
  /** IPv4 outer TOS; absent = 0 (inherit is 1). */
  tos?: number;
  /** Path MTU discovery (DF on outer packets); default true as with iproute2. */
  pmtudisc?: boolean;
}

export interface Ip6tnlOptions extends IpTunnelOptions {
  /** Inner protocol; default "any". */
  proto?: Ip6tnlProto;
  /** Tunnel encapsulation limit option; default 4, "none" leaves it out (IP6_TNL_F_IGN_ENCAP_LIMIT). */
  encapLimit?: number | 'none';
  /** Flow label (20 bits). */
  flowLabel?: number;
}

function port(name: string, v: number): Buffer {
  if (!Number.isInteger(v) || v < 0 || v > 0xffff) throw new TypeError(`invalid ${name} ${JSON.stringify(v)}: expected 0-65535`);
  const b = Buffer.alloc(2);
  b.writeUInt16BE(v); // __be16 on the wire
  return b;
}

function byte(name: string, v: number): Buffer {
  if (!Number.isInteger(v) || v < 0 || v > 255) throw new TypeError(`invalid ${name} ${JSON.stringify(v)}: expected 0-255`);
  return u8(v);
}

function address(name: string, ip: string, family: Family): Buffer {
  const p = parseIp(ip);
  if (p.family !== family) throw new TypeError(`invalid ${name} ${JSON.stringify(ip)}: expected an IPv${family} address`);
  return p.bytes;
}

function encapAttrs(e: Encap): Buffer[] {
  const type = TUNNEL_ENCAP[e.type];
  if (type === undefined || type === 0) throw new TypeError(`invalid encap type ${JSON.stringify(e.type)}: expected "fou" or "gue"`);
  let flags = 0;
  if (e.csum) flags |= TUNNEL_ENCAP_FLAG.CSUM;
  if (e.csum6) flags |= TUNNEL_ENCAP_FLAG.CSUM6;
  if (e.remcsum) flags |= TUNNEL_ENCAP_FLAG.REMCSUM;
  return [
    attr(IFLA_IPTUN.ENCAP_TYPE, u16(type)),
    attr(IFLA_IPTUN.ENCAP_FLAGS, u16(flags)),
    attr(IFLA_IPTUN.ENCAP_SPORT, port('encap sport', e.sport ?? 0)),
    attr(IFLA_IPTUN.ENCAP_DPORT, port('encap dport', e.dport)),
  ];
}

function commonAttrs(o: IpTunnelOptions, family: Family): Buffer[] {
  const out: Buffer[] = [];
  if (o.linkIndex !== undefined) out.push(attr(IFLA_IPTUN.LINK, u32(o.linkIndex)));
  if (o.local !== undefined) out.push(attr(IFLA_IPTUN.LOCAL, address('local', o.local, family)));
  if (o.remote !== undefined) out.push(attr(IFLA_IPTUN.REMOTE, address('remote', o.remote, family)));
  out.push(attr(IFLA_IPTUN.TTL, byte('ttl', o.ttl ?? 0)));
  if (o.fwmark !== undefined) out.push(attr(IFLA_IPTUN.FWMARK, u32(o.fwmark)));
  if (o.encap) out.push(...encapAttrs(o.encap));
  if (o.external) out.push(attr(IFLA_IPTUN.COLLECT_METADATA));
  return out;
}

/** IFLA_INFO_DATA children of an ipip link. */
export function ipipData(o: IpipOptions): Buffer[] {
  return [...commonAttrs(o, 4), attr(IFLA_IPTUN.TOS, byte('tos', o.tos ?? 0)), attr(IFLA_IPTUN.PMTUDISC, u8(o.pmtudisc === false ? 0 : 1))];
}

/** IFLA_INFO_DATA children of an ip6tnl link. */
export function ip6tnlData(o: Ip6tnlOptions): Buffer[] {
  const proto = IP6TNL_PROTOS[o.proto ?? 'any'];
  if (proto === undefined) throw new TypeError(`invalid ip6tnl proto ${JSON.stringify(o.proto)}: expected "ipip6", "ip6ip6" or "any"`);
  let flags = 0;
  const limit = o.encapLimit ?? IPV6_DEFAULT_TNL_ENCAP_LIMIT;
  if (limit === 'none') flags |= IP6_TNL_F_IGN_ENCAP_LIMIT;
  const out = [...commonAttrs(o, 6), attr(IFLA_IPTUN.PROTO, u8(proto))];
  out.push(attr(IFLA_IPTUN.ENCAP_LIMIT, byte('encap limit', limit === 'none' ? 0 : limit)));
  if (o.flowLabel !== undefined) {
    if (!Number.isInteger(o.flowLabel) || o.flowLabel < 0 || o.flowLabel > 0xfffff) {
      throw new TypeError(`invalid flow label ${JSON.stringify(o.flowLabel)}: expected 0-0xfffff`);
    }
    const b = Buffer.alloc(4);
    b.writeUInt32BE(o.flowLabel); // __be32 flowinfo, label in the low 20 bits
    out.push(attr(IFLA_IPTUN.FLOWINFO, b));
  }
  out.push(attr(IFLA_IPTUN.FLAGS, u32(flags)));
  return out;
}

/** IFLA_INFO_DATA children of an ipvlan link. */
export function ipvlanData(mode: IpvlanMode = 'l2', flag: IpvlanFlag = 'bridge'): Buffer[] {
  const m = IPVLAN_MODES[mode];
  if (m === undefined) throw new TypeError(`invalid ipvlan mode ${JSON.stringify(mode)}: expected "l2", "l3" or "l3s"`);
  const f = IPVLAN_FLAGS[flag];
  if (f === undefined) throw new TypeError(`invalid ipvlan flag ${JSON.stringify(flag)}: expected "bridge", "private" or "vepa"`);
  return [attr(IFLA_IPVLAN_MODE, u16(m)), attr(IFLA_IPVLAN_FLAGS, u16(f))];
}

/** What the kernel reports for a tunnel link (decoded IFLA_INFO_DATA of ipip / ip6tnl). */
export interface TunnelInfo {
  local?: string;
  remote?: string;
  /** 0 = inherit. */
  ttl: number;
  linkIndex?: number;
  /** ip6tnl: inner protocol. */
  proto?: Ip6tnlProto | number;
  /** ipip: path MTU discovery. */
  pmtudisc?: boolean;
  encap?: Required<Encap>;
  external: boolean;
  fwmark?: number;
}

export interface IpvlanInfo {
  mode: IpvlanMode;
  flag: IpvlanFlag;
}

const nameOf = <K extends string>(table: Record<K, number>, v: number): K | undefined =>
  (Object.keys(table) as K[]).find((k) => table[k] === v);

export function parseIpvlanData(data: Buffer): IpvlanInfo {
  const a = parseAttrs(data);
  const mode = a.has(IFLA_IPVLAN_MODE) ? readU16(a.get(IFLA_IPVLAN_MODE)!) : 0;
  const flags = a.has(IFLA_IPVLAN_FLAGS) ? readU16(a.get(IFLA_IPVLAN_FLAGS)!) : 0;
  return { mode: nameOf(IPVLAN_MODES, mode) ?? 'l2', flag: nameOf(IPVLAN_FLAGS, flags & 3) ?? 'bridge' };
}

export function parseTunnelData(data: Buffer): TunnelInfo {
  const a = parseAttrs(data);
  const ip = (t: number): string | undefined => {
    const b = a.get(t);
    if (!b || (b.length !== 4 && b.length !== 16) || b.every((x) => x === 0)) return undefined;
    return formatIp(b);
  };
  const info: TunnelInfo = { ttl: a.get(IFLA_IPTUN.TTL)?.[0] ?? 0, external: a.has(IFLA_IPTUN.COLLECT_METADATA) };
  const local = ip(IFLA_IPTUN.LOCAL);
  if (local) info.local = local;
  const remote = ip(IFLA_IPTUN.REMOTE);
  if (remote) info.remote = remote;
  const link = a.get(IFLA_IPTUN.LINK);
  if (link && readU32(link)) info.linkIndex = readU32(link);
  const proto = a.get(IFLA_IPTUN.PROTO);
  if (proto) info.proto = nameOf(IP6TNL_PROTOS, proto[0]!) ?? proto[0]!;
  const pmtu = a.get(IFLA_IPTUN.PMTUDISC);
  if (pmtu) info.pmtudisc = pmtu[0] !== 0;
  const fwmark = a.get(IFLA_IPTUN.FWMARK);
  if (fwmark && readU32(fwmark)) info.fwmark = readU32(fwmark);
  const type = a.get(IFLA_IPTUN.ENCAP_TYPE);
  const encapType = type ? nameOf(TUNNEL_ENCAP, readU16(type)) : undefined;
  if (encapType === 'fou' || encapType === 'gue') {
    const flags = a.has(IFLA_IPTUN.ENCAP_FLAGS) ? readU16(a.get(IFLA_IPTUN.ENCAP_FLAGS)!) : 0;
    info.encap = {
      type: encapType,
      sport: a.get(IFLA_IPTUN.ENCAP_SPORT)?.readUInt16BE(0) ?? 0,
      dport: a.get(IFLA_IPTUN.ENCAP_DPORT)?.readUInt16BE(0) ?? 0,
      csum: (flags & TUNNEL_ENCAP_FLAG.CSUM) !== 0,
      csum6: (flags & TUNNEL_ENCAP_FLAG.CSUM6) !== 0,
      remcsum: (flags & TUNNEL_ENCAP_FLAG.REMCSUM) !== 0,
    };
  }
  return info;
}
