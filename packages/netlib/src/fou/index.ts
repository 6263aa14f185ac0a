/**
 * Foo-over-UDP receive ports over generic netlink (family "fou", linux/fou.h): what
 * `ip fou add port 5555 ipproto 4` does. A FoU port is a UDP socket in the kernel of one
 * network namespace that strips the UDP header and hands the payload to the IP protocol
 * handler `ipproto` (4 = ipip, 41 = IPv6-in-IP), or parses a GUE header (type "gue").
 *
 * Each call opens a NETLINK_GENERIC socket inside `ns` (sockets stay bound to the namespace
 * they were created in, see netns/sockets.ts), resolves the family id through the generic
 * netlink controller once per process (ids are global), and closes the socket when done.
 * The `netlink` package provides the socket and framing; replies and errors are read here so
 * that failures are NetlinkError with the symbolic errno, as everywhere in netlib.
 */
import type { NetlinkMessage } from 'netlink/dist/structs';
import type { NetlinkSocket } from 'netlink/dist/netlink';
import { NetlinkError } from '../errors';
import { attr, attrList, parseAttrs, readS32, readU16, s32, str, u8 } from '../nl/attrs';
import { KernelErrno, toNetlinkError } from '../nl/errors';
import { AF_INET, AF_INET6, familyOfAf, formatIp, parseIp, type Family } from '../nl/inet';
import { NLM_F, type What } from '../nl/request';
import { runInNetns, type Netns } from '../netns/handle';

const NETLINK_GENERIC = 16;
const NLMSG_ERROR = 2;
const GENL_ID_CTRL = 16;
const CTRL_CMD_GETFAMILY = 3;
const CTRL_ATTR_FAMILY_ID = 1;
const CTRL_ATTR_FAMILY_NAME = 2;

export const FOU_GENL_NAME = 'fou';
const FOU_GENL_VERSION = 1;

export const FOU_CMD = { ADD: 1, DEL: 2, GET: 3 } as const;
export const FOU_ATTR = {
  PORT: 1,
  AF: 2,
  IPPROTO: 3,
  TYPE: 4,
  REMCSUM_NOPARTIAL: 5,
  LOCAL_V4: 6,
  LOCAL_V6: 7,
  PEER_V4: 8,
  PEER_V6: 9,
  PEER_PORT: 10,
  IFINDEX: 11,
} as const;
export const FOU_ENCAP = { direct: 1, gue: 2 } as const;
export type FouType = keyof typeof FOU_ENCAP;

/** Which FoU port: the kernel matches on all of these (port, family, local/peer, ifindex). */
export interface FouKey {
  /** UDP port the kernel listens on. */
  port: number;
  /** Outer address family of the UDP socket; default 4. */
  family?: Family;
  /** Bind to a local address (optional). */
  local?: string;
  /** Connect to a peer address and port (optional, both or neither). */
  peer?: string;
  peerPort?: number;
  /** Bind to a device (optional). */
  ifindex?: number;
}

export interface FouAddOptions extends FouKey {
  /** "direct" (FoU, the default) or "gue". */
  type?: FouType;
  /** IP protocol of the payload for direct FoU: 4 (ipip), 41 (ip6tnl / sit). Required for "direct". */
  ipproto?: number;
  /** GUE: refuse remote checksum offload partial mode. */
  remcsumNoPartial?: boolean;
}

export interface FouPort {
  port: number;
  family: Family;
  type: FouType;
  ipproto?: number;
  local?: string;
  peer?: string;
  peerPort?: number;
  ifindex?: number;
}

const genlHeader = (cmd: number): Buffer => Buffer.from([cmd, FOU_GENL_VERSION, 0, 0]);

function be16(name: string, v: number): Buffer {
  if (!Number.isInteger(v) || v < 0 || v > 0xffff) throw new TypeError(`fou: invalid ${name} ${JSON.stringify(v)}: expected 0-65535`);
  const b = Buffer.alloc(2);
  b.writeUInt16BE(v);
  return b;
}

/** FOU_ATTR_* for a key (what DEL and GET match on, and the base of ADD). */
export function keyAttrs(k: FouKey): Buffer[] {
  const family = k.family ?? 4;
  if (family !== 4 && family !== 6) throw new TypeError(`fou: invalid family ${JSON.stringify(family)}: expected 4 or 6`);
  const out = [attr(FOU_ATTR.PORT, be16('port', k.port)), attr(FOU_ATTR.AF, u8(family === 4 ? AF_INET : AF_INET6))];
  const addr = (name: string, ip: string, v4: number, v6: number): Buffer => {
    const p = parseIp(ip);
    if (p.family !== family) throw new TypeError(`fou: invalid ${name} ${JSON.stringify(ip)}: expected an IPv${family} address`);
    return attr(family === 4 ? v4 : v6, p.bytes);
  };
  if (k.local !== undefined) out.push(addr('local', k.local, FOU_ATTR.LOCAL_V4, FOU_ATTR.LOCAL_V6));
  if ((k.peer === undefined) !== (k.peerPort === undefined)) throw new TypeError('fou: peer and peerPort go together');
  if (k.peer !== undefined) out.push(addr('peer', k.peer, FOU_ATTR.PEER_V4, FOU_ATTR.PEER_V6));
  if (k.peerPort !== undefined) out.push(attr(FOU_ATTR.PEER_PORT, be16('peer port', k.peerPort)));
  if (k.ifindex !== undefined) out.push(attr(FOU_ATTR.IFINDEX, s32(k.ifindex)));
  return out;
}

/** FOU_ATTR_* of an ADD request. */
export function addAttrs(o: FouAddOptions): Buffer[] {
  const type = o.type ?? 'direct';
  const t = FOU_ENCAP[type];
  if (t === undefined) throw new TypeError(`fou: invalid type ${JSON.stringify(o.type)}: expected "direct" or "gue"`);
  const out = keyAttrs(o);
  out.push(attr(FOU_ATTR.TYPE, u8(t)));
  if (type === 'direct') {
    if (o.ipproto === undefined || !Number.isInteger(o.ipproto) || o.ipproto < 1 || o.ipproto > 255) {
      throw new TypeError(`fou: invalid ipproto ${JSON.stringify(o.ipproto)}: direct FoU needs the payload's IP protocol (1-255, e.g. 4)`);
    }
    out.push(attr(FOU_ATTR.IPPROTO, u8(o.ipproto)));
  }
  if (o.remcsumNoPartial) out.push(attr(FOU_ATTR.REMCSUM_NOPARTIAL));
  return out;
}

/** Decodes one FoU port message (attributes after the genl header). */
export function parsePort(data: Buffer): FouPort {
  const a = parseAttrs(data);
  const family = familyOfAf(a.get(FOU_ATTR.AF)?.[0] ?? AF_INET) ?? 4;
  const typeNum = a.get(FOU_ATTR.TYPE)?.[0] ?? FOU_ENCAP.direct;
  const p: FouPort = {
    port: a.get(FOU_ATTR.PORT)?.readUInt16BE(0) ?? 0,
    family,
    type: typeNum === FOU_ENCAP.gue ? 'gue' : 'direct',
  };
  const proto = a.get(FOU_ATTR.IPPROTO);
  if (proto && p.type === 'direct') p.ipproto = proto[0]!;
  const ip = (t4: number, t6: number): string | undefined => {
    const b = a.get(family === 4 ? t4 : t6);
    return b && b.some((x) => x !== 0) ? formatIp(b) : undefined;
  };
  const local = ip(FOU_ATTR.LOCAL_V4, FOU_ATTR.LOCAL_V6);
  if (local) p.local = local;
  const peer = ip(FOU_ATTR.PEER_V4, FOU_ATTR.PEER_V6);
  if (peer) p.peer = peer;
  const peerPort = a.get(FOU_ATTR.PEER_PORT)?.readUInt16BE(0);
  if (peerPort) p.peerPort = peerPort;
  const ifindex = a.get(FOU_ATTR.IFINDEX);
  if (ifindex && readS32(ifindex)) p.ifindex = readS32(ifindex);
  return p;
}

// ---------------------------------------------------------------------------------------------
// Generic netlink transport

let familyId: number | undefined;

/** A NETLINK_GENERIC socket created inside `ns`; closed by the caller. */
function openGenl(ns: Netns): NetlinkSocket {
  const { createNetlink } = require('netlink/dist/netlink') as typeof import('netlink/dist/netlink');
  return runInNetns(ns, () => createNetlink(NETLINK_GENERIC));
}

/**
 * One request; returns the payloads (after the 4-byte genl header) of the data replies.
 * The package's own error check is off: it turns errno into text, we keep the number.
 */
async function exchange(sock: NetlinkSocket, type: number, flags: number, body: Buffer, what: What): Promise<Buffer[]> {
  let msgs: NetlinkMessage[];
  try {
    [msgs] = await sock.request(type, body, { flags, checkError: false });
  } catch (err) {
    throw toNetlinkError(what.op, what.object, err);
  }
  const out: Buffer[] = [];
  for (const m of msgs) {
    if (m.type === NLMSG_ERROR) {
      const errno = m.data.length >= 4 ? readS32(m.data) : 0;
      if (errno !== 0) throw toNetlinkError(what.op, what.object, new KernelErrno(errno));
      continue; // ACK
    }
    if (m.type === type) out.push(m.data.subarray(4));
  }
  return out;
}

/** The id of the "fou" generic netlink family (ENOENT when the kernel has no fou module). */
async function fouFamily(sock: NetlinkSocket): Promise<number> {
  if (familyId !== undefined) return familyId;
  const body = Buffer.concat([Buffer.from([CTRL_CMD_GETFAMILY, 1, 0, 0]), attr(CTRL_ATTR_FAMILY_NAME, str(FOU_GENL_NAME))]);
  const [reply] = await exchange(sock, GENL_ID_CTRL, 0, body, { op: 'resolve generic netlink family', object: FOU_GENL_NAME });
  const id = reply && attrList(reply).find(([t]) => t === CTRL_ATTR_FAMILY_ID)?.[1];
  if (!id) throw new NetlinkError('resolve generic netlink family', FOU_GENL_NAME, 'ENOENT');
  familyId = readU16(id);
  return familyId;
}

async function fouRequest(ns: Netns, cmd: number, flags: number, attrs: Buffer[], what: What): Promise<Buffer[]> {
  const sock = openGenl(ns);
  try {
    const family = await fouFamily(sock);
    return await exchange(sock, family, flags, Buffer.concat([genlHeader(cmd), ...attrs]), what);
  } finally {
    sock.close();
  }
}

const describe = (k: FouKey): string =>
  `port ${k.port}${k.family === 6 ? ' -6' : ''}${k.local ? ` local ${k.local}` : ''}${k.peer ? ` peer ${k.peer} peer_port ${k.peerPort}` : ''}${k.ifindex ? ` dev index ${k.ifindex}` : ''}`;

// ---------------------------------------------------------------------------------------------
// Public API

/**
 * Opens a FoU receive port in `ns` (`ip fou add port P ipproto N [-6]`). When a FoU port with
 * the same key is already open the kernel answers EADDRINUSE (its UDP bind fails first) or
 * EALREADY; both are reported as NetlinkError EEXIST (isExistsError) so ADD paths can stay
 * idempotent. EADDRINUSE stays as it is when another UDP socket holds the port.
 */
export async function add(ns: Netns, o: FouAddOptions): Promise<void> {
  const attrs = addAttrs(o);
  const what = { op: 'add fou', object: `${describe(o)} ${o.type === 'gue' ? 'gue' : `ipproto ${o.ipproto}`} in ${ns.path}` };
  try {
    await fouRequest(ns, FOU_CMD.ADD, 0, attrs, what);
  } catch (err) {
    if (err instanceof NetlinkError && (err.errno === 'EADDRINUSE' || err.errno === 'EALREADY') && (await find(ns, o))) {
      throw new NetlinkError(what.op, what.object, 'EEXIST', { cause: err });
    }
    throw err;
  }
}

/**
 * Closes a FoU port. The kernel answers EINVAL for a port that is not open; that case is
 * reported as NetlinkError ENOENT (isNotFoundError) so DEL paths can stay idempotent.
 */
export async function del(ns: Netns, k: FouKey): Promise<void> {
  const what = { op: 'del fou', object: `${describe(k)} in ${ns.path}` };
  try {
    await fouRequest(ns, FOU_CMD.DEL, 0, keyAttrs(k), what);
  } catch (err) {
    if (err instanceof NetlinkError && err.errno === 'EINVAL' && !(await find(ns, k))) {
      throw new NetlinkError(what.op, what.object, 'ENOENT', { cause: err });
    }
    throw err;
  }
}

/** Every FoU port open in `ns` (`ip fou show`). */
export async function list(ns: Netns): Promise<FouPort[]> {
  const replies = await fouRequest(ns, FOU_CMD.GET, NLM_F.DUMP, [], { op: 'list fou', object: `in ${ns.path}` });
  return replies.map(parsePort);
}

/** The FoU port with this key, or undefined. */
export async function find(ns: Netns, k: FouKey): Promise<FouPort | undefined> {
  try {
    const [reply] = await fouRequest(ns, FOU_CMD.GET, 0, keyAttrs(k), { op: 'find fou', object: `${describe(k)} in ${ns.path}` });
    return reply ? parsePort(reply) : undefined;
  } catch (err) {
    if (err instanceof NetlinkError && (err.errno === 'ESRCH' || err.errno === 'ENOENT')) return undefined;
    throw err;
  }
}
