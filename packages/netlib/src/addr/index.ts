/**
 * Interface addresses, IPv4 and IPv6 (RTM_{NEW,DEL,GET}ADDR).
 */
import { attr, parseAttrs, readU32, writeU32 } from '../nl/attrs';
import { afOf, broadcastOf, familyOfAf, formatPrefix, parsePrefix, type Family } from '../nl/inet';
import { dump, NLM_F, request } from '../nl/request';
import { RTM } from '../nl/rtm';
import type { Netns } from '../netns/handle';

export interface Address {
  index: number;
  /** CIDR: "10.1.0.5/24", "fd00::5/64". */
  address: string;
  family: Family;
  /** 0 universe, 200 site, 253 link, 254 host. */
  scope: number;
  /** IFA_F_* bits (see IFA_F), e.g. tentative while IPv6 DAD runs. */
  flags: number;
}

/** Address flags (linux/if_addr.h). */
export const IFA_F = {
  SECONDARY: 0x01,
  NODAD: 0x02,
  OPTIMISTIC: 0x04,
  DADFAILED: 0x08,
  HOMEADDRESS: 0x10,
  DEPRECATED: 0x20,
  TENTATIVE: 0x40,
  PERMANENT: 0x80,
  NOPREFIXROUTE: 0x200,
} as const;

const IFA_ADDRESS = 1;
const IFA_LOCAL = 2;
const IFA_BROADCAST = 4;
/** u32 flags, superseding the u8 in the header when present. */
const IFA_FLAGS = 8;

/** struct ifaddrmsg { u8 family; u8 prefixlen; u8 flags; u8 scope; u32 index; } */
function ifaddrmsg(af: number, prefixLen: number, flags: number, scope: number, index: number): Buffer {
  const b = Buffer.from([af, prefixLen, flags & 0xff, scope, 0, 0, 0, 0]);
  writeU32(b, index, 4);
  return b;
}

function parseAddress(data: Buffer): Address | undefined {
  const family = familyOfAf(data[0]!);
  if (!family) return undefined;
  const a = parseAttrs(data, 8);
  // IFA_LOCAL is the interface's own address; IFA_ADDRESS is the peer on point-to-point links.
  const ip = a.get(IFA_LOCAL) ?? a.get(IFA_ADDRESS);
  if (!ip) return undefined;
  const flags = a.has(IFA_FLAGS) ? readU32(a.get(IFA_FLAGS)!) : data[2]!;
  return { index: readU32(data, 4), address: formatPrefix(ip, data[1]!), family, scope: data[3]!, flags };
}

export interface ListOptions {
  index?: number;
  family?: Family;
}

/** Addresses in the namespace, optionally of one link and/or one family. */
export async function list(ns: Netns, o: ListOptions = {}): Promise<Address[]> {
  const af = o.family ? afOf(o.family) : 0;
  const replies = await dump(ns, RTM.GETADDR, ifaddrmsg(af, 0, 0, 0, 0), { op: 'list addresses', object: `in ${ns.path}` });
  const out: Address[] = [];
  for (const r of replies) {
    // struct ifaddrmsg's ifa_index (offset 4): another link's address is skipped undecoded, as route.list does.
    if (r.type !== RTM.NEWADDR || (o.index !== undefined && r.data.length >= 8 && readU32(r.data, 4) !== o.index)) continue;
    const a = parseAddress(r.data);
    if (a && (o.index === undefined || a.index === o.index) && (o.family === undefined || a.family === o.family)) out.push(a);
  }
  return out;
}

export interface AddOptions {
  /** IPv6: skip duplicate address detection, so the address is usable at once. */
  noDad?: boolean;
  /** Address scope (default 0, universe). */
  scope?: number;
}

/**
 * Adds `cidr` to link `index`. IPv4 addresses get the prefix's broadcast address,
 * as `ip addr add ... brd +` would. EEXIST when the address is already there.
 */
export async function add(ns: Netns, index: number, cidr: string, o: AddOptions = {}): Promise<void> {
  const p = parsePrefix(cidr);
  const flags = o.noDad && p.family === 6 ? IFA_F.NODAD : 0;
  const body = [ifaddrmsg(afOf(p.family), p.prefixLen, flags, o.scope ?? 0, index), attr(IFA_LOCAL, p.bytes), attr(IFA_ADDRESS, p.bytes)];
  if (p.family === 4 && p.prefixLen < 31) body.push(attr(IFA_BROADCAST, broadcastOf(p)));
  await request(ns, RTM.NEWADDR, NLM_F.CREATE | NLM_F.EXCL, Buffer.concat(body), {
    op: 'add address',
    object: `${cidr} dev index ${index}`,
  });
}

/** Removes `cidr` from link `index`; EADDRNOTAVAIL when it is not there. */
export async function del(ns: Netns, index: number, cidr: string): Promise<void> {
  const p = parsePrefix(cidr);
  const body = [ifaddrmsg(afOf(p.family), p.prefixLen, 0, 0, index), attr(IFA_LOCAL, p.bytes), attr(IFA_ADDRESS, p.bytes)];
  await request(ns, RTM.DELADDR, 0, Buffer.concat(body), { op: 'del address', object: `${cidr} dev index ${index}` });
}
