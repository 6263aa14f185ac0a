/**
 * Routes, IPv4 and IPv6, in any table (RTM_{NEW,DEL,GET}ROUTE).
 *
 * Table ids above 255 do not fit rtmsg.rtm_table (the kernel then reports
 * RT_TABLE_COMPAT there), so the id always travels in RTA_TABLE and is read back
 * from it.
 */
import { attr, parseAttrs, readS32, readU16, readU32, s32, u16, u32 } from '../nl/attrs';
import { afOf, familyOfAf, formatIp, formatPrefix, parseIp, parsePrefix, type Family } from '../nl/inet';
import { dump, NLM_F, request, type What } from '../nl/request';
import { RTM } from '../nl/rtm';
import type { Netns } from '../netns/handle';

export interface Route {
  /** CIDR, or "default" for 0.0.0.0/0 and ::/0 (family then comes from `gw` or `family`, else 4). */
  dst: string;
  family?: Family;
  gw?: string;
  oif?: number;
  /** Routing table (default main, 254). */
  table?: number;
  /** 0 universe, 253 link, 254 host. Default on add: link for IPv4 routes without gateway, else universe. */
  scope?: number;
  /** Who installed it (default boot, 3); handy to tag and later find our routes. */
  protocol?: number;
  /** RTA_PRIORITY. */
  metric?: number;
  /** Gateway reachable on the link even if no route says so (RTNH_F_ONLINK). */
  onlink?: boolean;
  /** Preferred source address (RTA_PREFSRC). */
  src?: string;
  /** RTN_*: 1 unicast (default), 2 local, 6 blackhole, 7 unreachable... */
  type?: number;
  /**
   * Next hops of a multipath route (RTA_MULTIPATH): `gw` and `oif` are then unset. IPv6 ECMP
   * routes (same destination and metric, several gateways) are dumped this way too.
   */
  nexthops?: Nexthop[];
}

/** One next hop of a multipath route (struct rtnexthop + its RTA_GATEWAY). */
export interface Nexthop {
  gw?: string;
  oif: number;
  /** 1-256 (rtnh_hops + 1). */
  weight?: number;
  onlink?: boolean;
}

export const RT_TABLE = { UNSPEC: 0, DEFAULT: 253, MAIN: 254, LOCAL: 255 } as const;
export const RT_SCOPE = { UNIVERSE: 0, SITE: 200, LINK: 253, HOST: 254, NOWHERE: 255 } as const;
export const RTPROT = { UNSPEC: 0, KERNEL: 2, BOOT: 3, STATIC: 4 } as const;
export const RTN = {
  UNSPEC: 0,
  UNICAST: 1,
  LOCAL: 2,
  BROADCAST: 3,
  ANYCAST: 4,
  MULTICAST: 5,
  BLACKHOLE: 6,
  UNREACHABLE: 7,
  PROHIBIT: 8,
} as const;

const RTA_DST = 1;
const RTA_OIF = 4;
const RTA_GATEWAY = 5;
const RTA_PRIORITY = 6;
const RTA_PREFSRC = 7;
const RTA_MULTIPATH = 9;
const RTA_TABLE = 15;
const RTNH_HEADER = 8;
const RTNH_F_ONLINK = 0x4;
const RTM_F_CLONED = 0x200;

/** struct rtmsg { u8 family, dst_len, src_len, tos, table, protocol, scope, type; u32 flags; } */
function rtmsg(f: {
  af: number;
  dstLen?: number;
  table?: number;
  protocol?: number;
  scope?: number;
  type?: number;
  flags?: number;
}): Buffer {
  const b = Buffer.from([f.af, f.dstLen ?? 0, 0, 0, f.table ?? 0, f.protocol ?? 0, f.scope ?? 0, f.type ?? 0, 0, 0, 0, 0]);
  b.set(u32(f.flags ?? 0), 8);
  return b;
}

function parseRoute(data: Buffer): (Route & { family: Family; table: number; cloned: boolean }) | undefined {
  const family = familyOfAf(data[0]!);
  if (!family) return undefined;
  const a = parseAttrs(data, 12);
  const dstLen = data[1]!;
  const dst = a.get(RTA_DST);
  const r: Route & { family: Family; table: number; cloned: boolean } = {
    dst: dstLen === 0 || !dst ? 'default' : formatPrefix(dst, dstLen),
    family,
    table: a.has(RTA_TABLE) ? readU32(a.get(RTA_TABLE)!) : data[4]!,
    protocol: data[5]!,
    scope: data[6]!,
    type: data[7]!,
    cloned: (readU32(data, 8) & RTM_F_CLONED) !== 0,
  };
  const gw = a.get(RTA_GATEWAY);
  if (gw) r.gw = formatIp(gw);
  const oif = a.get(RTA_OIF);
  if (oif) r.oif = readU32(oif);
  const prio = a.get(RTA_PRIORITY);
  if (prio) r.metric = readU32(prio);
  const src = a.get(RTA_PREFSRC);
  if (src) r.src = formatIp(src);
  if (readU32(data, 8) & RTNH_F_ONLINK) r.onlink = true;
  const mp = a.get(RTA_MULTIPATH);
  if (mp) r.nexthops = parseNexthops(mp);
  return r;
}

/** struct rtnexthop { u16 len; u8 flags; u8 hops; s32 ifindex; } followed by its attributes. */
function parseNexthops(b: Buffer): Nexthop[] {
  const out: Nexthop[] = [];
  for (let off = 0; off + RTNH_HEADER <= b.length;) {
    const len = readU16(b, off);
    if (len < RTNH_HEADER || off + len > b.length) break;
    const nh: Nexthop = { oif: readS32(b, off + 4), weight: b[off + 3]! + 1 };
    if (b[off + 2]! & RTNH_F_ONLINK) nh.onlink = true;
    const gw = parseAttrs(b.subarray(off + RTNH_HEADER, off + len)).get(RTA_GATEWAY);
    if (gw) nh.gw = formatIp(gw);
    out.push(nh);
    off += (len + 3) & ~3;
  }
  return out;
}

function encodeNexthops(nhs: Nexthop[]): Buffer {
  const parts = nhs.map((nh) => {
    const attrs = nh.gw ? attr(RTA_GATEWAY, parseIp(nh.gw).bytes) : Buffer.alloc(0);
    const head = Buffer.concat([
      u16(RTNH_HEADER + attrs.length),
      Buffer.from([nh.onlink ? RTNH_F_ONLINK : 0, (nh.weight ?? 1) - 1]),
      s32(nh.oif),
    ]);
    return Buffer.concat([head, attrs]);
  });
  return attr(RTA_MULTIPATH, parts);
}

function familyOf(r: Route): Family {
  if (r.family) return r.family;
  if (r.dst !== 'default') return parsePrefix(r.dst).family;
  const gw = r.gw ?? r.nexthops?.find((n) => n.gw)?.gw;
  if (gw) return parseIp(gw).family;
  return 4;
}

function describe(r: Route): string {
  let s = r.dst;
  if (r.gw) s += ` via ${r.gw}`;
  if (r.oif) s += ` dev index ${r.oif}`;
  for (const nh of r.nexthops ?? []) s += ` nexthop${nh.gw ? ` via ${nh.gw}` : ''} dev index ${nh.oif}`;
  if (r.metric !== undefined) s += ` metric ${r.metric}`;
  return `${s} table ${r.table ?? RT_TABLE.MAIN}`;
}

/**
 * The rtmsg + attributes for `r`. For a delete only the fields given are sent, so the
 * kernel matches any value of the others (scope NOWHERE, protocol and type 0 are its
 * wildcards).
 */
function encode(r: Route, forDelete: boolean): Buffer {
  const family = familyOf(r);
  const table = r.table ?? RT_TABLE.MAIN;
  const dst = r.dst === 'default' ? undefined : parsePrefix(r.dst);
  if (dst && dst.family !== family) throw new TypeError(`route ${r.dst}: family ${family} does not match`);
  let scope = r.scope;
  if (scope === undefined) {
    if (forDelete) scope = RT_SCOPE.NOWHERE;
    // As `ip route add`: IPv6 routes are always universe; IPv4 local routes are host
    // scope, and IPv4 unicast routes without a gateway are link scope.
    else if (family === 6) scope = RT_SCOPE.UNIVERSE;
    else if (r.type === RTN.LOCAL) scope = RT_SCOPE.HOST;
    else if (!r.gw && !r.nexthops?.some((n) => n.gw) && (r.type ?? RTN.UNICAST) === RTN.UNICAST) scope = RT_SCOPE.LINK;
    else scope = RT_SCOPE.UNIVERSE;
  }
  const head = rtmsg({
    af: afOf(family),
    dstLen: dst?.prefixLen ?? 0,
    table: table < 256 ? table : RT_TABLE.UNSPEC,
    protocol: r.protocol ?? (forDelete ? RTPROT.UNSPEC : RTPROT.BOOT),
    scope,
    type: r.type ?? (forDelete ? RTN.UNSPEC : RTN.UNICAST),
    flags: r.onlink ? RTNH_F_ONLINK : 0,
  });
  const attrs = [attr(RTA_TABLE, u32(table))];
  if (dst) attrs.push(attr(RTA_DST, dst.bytes));
  if (r.gw) attrs.push(attr(RTA_GATEWAY, parseIp(r.gw).bytes));
  if (r.oif) attrs.push(attr(RTA_OIF, u32(r.oif)));
  if (r.metric !== undefined) attrs.push(attr(RTA_PRIORITY, u32(r.metric)));
  if (r.src) attrs.push(attr(RTA_PREFSRC, parseIp(r.src).bytes));
  if (r.nexthops && r.nexthops.length > 0) attrs.push(encodeNexthops(r.nexthops));
  return Buffer.concat([head, ...attrs]);
}

export interface ListOptions {
  /** Table to list: undefined = main, 0 = every table. */
  table?: number;
  family?: Family;
  oif?: number;
  /** Only routes of this protocol (rtm_protocol: who installed them). */
  protocol?: number;
}

const RT_TABLE_COMPAT = 252;

/**
 * Whether a dumped route can match, from its fixed header alone. The kernel filters dumps only on a
 * socket with NETLINK_GET_STRICT_CHK, which the netlink package cannot set, so a dump carries every
 * table (local's routes come two per address): decoding only the routes that can match is most of
 * what a per-pod call spends on a node with many pods (docs/build.md).
 */
function mayMatch(data: Buffer, table: number, o: ListOptions): boolean {
  if (data.length < 12 || (readU32(data, 8) & RTM_F_CLONED) !== 0) return false;
  if (o.protocol !== undefined && data[5] !== o.protocol) return false;
  // Tables above 255 travel as RT_TABLE_COMPAT in the header and in full in RTA_TABLE.
  return table === 0 || data[4] === table || data[4] === RT_TABLE_COMPAT;
}

/** Routes of one table (main by default), optionally of one family, output link or protocol. */
export async function list(ns: Netns, o: ListOptions = {}): Promise<Route[]> {
  const table = o.table ?? RT_TABLE.MAIN;
  const af = o.family ? afOf(o.family) : 0;
  const replies = await dump(ns, RTM.GETROUTE, rtmsg({ af }), { op: 'list routes', object: `table ${table === 0 ? 'all' : table}` });
  const out: Route[] = [];
  for (const reply of replies) {
    if (reply.type !== RTM.NEWROUTE || !mayMatch(reply.data, table, o)) continue;
    const r = parseRoute(reply.data);
    if (!r || r.cloned) continue;
    if (table !== 0 && r.table !== table) continue;
    if (o.family && r.family !== o.family) continue;
    if (o.oif !== undefined && r.oif !== o.oif) continue;
    const { cloned: _cloned, ...route } = r;
    out.push(route);
  }
  return out;
}

async function send(ns: Netns, type: number, flags: number, r: Route, op: string): Promise<void> {
  const what: What = { op, object: describe(r) };
  await request(ns, type, flags, encode(r, type === RTM.DELROUTE), what);
}

/** Adds a route; EEXIST when one with the same destination, table and metric exists. */
export const add = (ns: Netns, r: Route): Promise<void> => send(ns, RTM.NEWROUTE, NLM_F.CREATE | NLM_F.EXCL, r, 'add route');

/** Adds or replaces the route with the same destination, table and metric. */
export const replace = (ns: Netns, r: Route): Promise<void> => send(ns, RTM.NEWROUTE, NLM_F.CREATE | NLM_F.REPLACE, r, 'replace route');

/** Deletes the route matching the fields given (table defaults to main); ESRCH when there is none. */
export const del = (ns: Netns, r: Route): Promise<void> => send(ns, RTM.DELROUTE, 0, r, 'del route');

/** Asks the kernel which route it would use to reach `dst` (like `ip route get`). */
export async function get(ns: Netns, dst: string): Promise<Route> {
  const { family, bytes } = parseIp(dst);
  const what: What = { op: 'get route', object: `to ${dst}` };
  const body = Buffer.concat([rtmsg({ af: afOf(family), dstLen: bytes.length * 8 }), attr(RTA_DST, bytes)]);
  const [reply] = await request(ns, RTM.GETROUTE, 0, body, what);
  const r = reply && parseRoute(reply.data);
  if (!r) throw new Error(`netlink: ${what.op} ${what.object}: no answer`);
  const { cloned: _cloned, ...route } = r;
  return route;
}
