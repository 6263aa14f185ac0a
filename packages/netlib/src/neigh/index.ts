/**
 * Neighbour (ARP / NDP) entries, IPv4 and IPv6 (RTM_{NEW,DEL,GET}NEIGH).
 */
import { attr, parseAttrs, readS32, readU16, writeS32, writeU16 } from '../nl/attrs';
import { afOf, familyOfAf, formatIp, formatMac, parseIp, parseMac, type Family } from '../nl/inet';
import { dump, NLM_F, request } from '../nl/request';
import { RTM } from '../nl/rtm';
import type { Netns } from '../netns/handle';

/** Neighbour states (NUD_*); PERMANENT entries never expire and are never probed. */
export const NUD = {
  NONE: 0x00,
  INCOMPLETE: 0x01,
  REACHABLE: 0x02,
  STALE: 0x04,
  DELAY: 0x08,
  PROBE: 0x10,
  FAILED: 0x20,
  NOARP: 0x40,
  PERMANENT: 0x80,
} as const;

export interface Neighbour {
  index: number;
  ip: string;
  /** Link-layer address; absent while unresolved. */
  mac?: string;
  /** NUD_* state. */
  state: number;
  family: Family;
}

const NDA_DST = 1;
const NDA_LLADDR = 2;

/** struct ndmsg { u8 family; u8 pad1; u16 pad2; s32 ifindex; u16 state; u8 flags; u8 type; } */
function ndmsg(af: number, index: number, state: number): Buffer {
  const b = Buffer.alloc(12);
  b[0] = af;
  writeS32(b, index, 4);
  writeU16(b, state, 8);
  return b;
}

function parseNeighbour(data: Buffer): Neighbour | undefined {
  const family = familyOfAf(data[0]!);
  if (!family) return undefined;
  const a = parseAttrs(data, 12);
  const dst = a.get(NDA_DST);
  if (!dst) return undefined;
  const n: Neighbour = { index: readS32(data, 4), ip: formatIp(dst), state: readU16(data, 8), family };
  const ll = a.get(NDA_LLADDR);
  if (ll) n.mac = formatMac(ll);
  return n;
}

export interface ListOptions {
  index?: number;
  family?: Family;
}

/** Neighbour entries, optionally of one link and/or one family. */
export async function list(ns: Netns, o: ListOptions = {}): Promise<Neighbour[]> {
  // One dump per family: an unspecified-family dump would also walk the bridge FDB.
  const families: Family[] = o.family ? [o.family] : [4, 6];
  const out: Neighbour[] = [];
  for (const family of families) {
    const replies = await dump(ns, RTM.GETNEIGH, ndmsg(afOf(family), 0, 0), { op: 'list neighbours', object: `ipv${family}` });
    for (const r of replies) {
      if (r.type !== RTM.NEWNEIGH) continue;
      const n = parseNeighbour(r.data);
      if (n && n.family === family && (o.index === undefined || n.index === o.index)) out.push(n);
    }
  }
  return out;
}

export interface NeighbourSpec {
  index: number;
  ip: string;
  mac: string;
  /** NUD_* state (default PERMANENT). */
  state?: number;
}

function encode(n: { index: number; ip: string; mac?: string; state?: number }): Buffer {
  const { family, bytes } = parseIp(n.ip);
  const parts = [ndmsg(afOf(family), n.index, n.state ?? 0), attr(NDA_DST, bytes)];
  if (n.mac !== undefined) parts.push(attr(NDA_LLADDR, parseMac(n.mac)));
  return Buffer.concat(parts);
}

const describe = (n: { index: number; ip: string; mac?: string }): string =>
  `${n.ip}${n.mac ? ` lladdr ${n.mac}` : ''} dev index ${n.index}`;

/** Adds an entry; EEXIST when one exists for this address on this link. */
export async function add(ns: Netns, n: NeighbourSpec): Promise<void> {
  await request(ns, RTM.NEWNEIGH, NLM_F.CREATE | NLM_F.EXCL, encode({ ...n, state: n.state ?? NUD.PERMANENT }), {
    op: 'add neighbour',
    object: describe(n),
  });
}

/** Adds or overwrites the entry for this address on this link. */
export async function replace(ns: Netns, n: NeighbourSpec): Promise<void> {
  await request(ns, RTM.NEWNEIGH, NLM_F.CREATE | NLM_F.REPLACE, encode({ ...n, state: n.state ?? NUD.PERMANENT }), {
    op: 'replace neighbour',
    object: describe(n),
  });
}

/** Deletes the entry for this address on this link; ENOENT when there is none. */
export async function del(ns: Netns, n: { index: number; ip: string }): Promise<void> {
  await request(ns, RTM.DELNEIGH, 0, encode(n), { op: 'del neighbour', object: describe(n) });
}
