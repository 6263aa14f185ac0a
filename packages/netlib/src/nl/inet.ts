/**
 * Address <-> bytes conversions for netlink payloads (network byte order).
 *
 * Kept here rather than in src/ip (CIDR math on `ip-address`) so that kernel calls
 * do not pay for loading that library; these are the only conversions they need.
 */
import { tryParseIp } from '../ip/parse';

export type Family = 4 | 6;
export const AF_INET = 2;
export const AF_INET6 = 10;

export const afOf = (family: Family): number => (family === 4 ? AF_INET : AF_INET6);

export function familyOfAf(af: number): Family | undefined {
  if (af === AF_INET) return 4;
  if (af === AF_INET6) return 6;
  return undefined;
}

export interface Prefix {
  family: Family;
  bytes: Buffer;
  prefixLen: number;
}

/** Parses an IPv4 or IPv6 address; throws TypeError on anything else (zone ids included). */
export function parseIp(ip: string): { family: Family; bytes: Buffer } {
  // netlib's own parser, not node:net's isIP: node:net drags streams and sockets into every plugin start.
  const v = tryParseIp(ip);
  if (v?.family === 4) return { family: 4, bytes: Buffer.from(ip.split('.').map(Number)) };
  if (v?.family === 6) return { family: 6, bytes: parseIPv6(ip) };
  throw new TypeError(`invalid IP address ${JSON.stringify(ip)}`);
}

function parseIPv6(ip: string): Buffer {
  let text = ip;
  const tail: number[] = [];
  // An embedded IPv4 tail ("::ffff:10.0.0.1") stands for the last two groups.
  const lastColon = text.lastIndexOf(':');
  if (text.includes('.', lastColon)) {
    const v4 = text
      .slice(lastColon + 1)
      .split('.')
      .map(Number);
    tail.push((v4[0]! << 8) | v4[1]!, (v4[2]! << 8) | v4[3]!);
    text = `${text.slice(0, lastColon + 1)}0:0`;
  }
  const [head, rest] = text.split('::') as [string, string | undefined];
  const groups = (s: string): number[] => (s === '' ? [] : s.split(':').map((g) => parseInt(g, 16)));
  const left = groups(head);
  const right = rest === undefined ? [] : groups(rest);
  const all = rest === undefined ? left : [...left, ...new Array<number>(8 - left.length - right.length).fill(0), ...right];
  if (tail.length) all.splice(6, 2, ...tail);
  const out = Buffer.alloc(16);
  all.forEach((g, i) => out.writeUInt16BE(g, i * 2));
  return out;
}

/** Formats 4 or 16 bytes as text (RFC 5952 for IPv6: lower case, longest zero run compressed). */
export function formatIp(b: Buffer): string {
  if (b.length === 4) return `${b[0]}.${b[1]}.${b[2]}.${b[3]}`;
  if (b.length !== 16) throw new TypeError(`address of ${b.length} bytes`);
  const g: number[] = [];
  for (let i = 0; i < 16; i += 2) g.push(b.readUInt16BE(i));
  // IPv4-mapped addresses read better with their IPv4 part, as iproute2 prints them.
  if (g.slice(0, 5).every((x) => x === 0) && g[5] === 0xffff) return `::ffff:${b[12]}.${b[13]}.${b[14]}.${b[15]}`;
  let best = -1;
  let bestLen = 1; // a single zero group is never compressed
  for (let i = 0; i < 8;) {
    if (g[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && g[j] === 0) j++;
    if (j - i > bestLen) [best, bestLen] = [i, j - i];
    i = j;
  }
  const hex = (xs: number[]): string => xs.map((x) => x.toString(16)).join(':');
  if (best < 0) return hex(g);
  return `${hex(g.slice(0, best))}::${hex(g.slice(best + bestLen))}`;
}

/** Parses "10.1.0.5/24" or "fd00::1/64"; a bare address means a host prefix. */
export function parsePrefix(cidr: string): Prefix {
  const slash = cidr.indexOf('/');
  const { family, bytes } = parseIp(slash < 0 ? cidr : cidr.slice(0, slash));
  const max = family === 4 ? 32 : 128;
  const lenText = slash < 0 ? String(max) : cidr.slice(slash + 1);
  const prefixLen = /^\d{1,3}$/.test(lenText) ? Number(lenText) : NaN;
  if (!(prefixLen >= 0 && prefixLen <= max)) throw new TypeError(`invalid prefix length in ${JSON.stringify(cidr)}`);
  return { family, bytes, prefixLen };
}

export const formatPrefix = (bytes: Buffer, prefixLen: number): string => `${formatIp(bytes)}/${prefixLen}`;

/** The IPv4 broadcast address of a prefix (host bits all ones). */
export function broadcastOf(p: Prefix): Buffer {
  const out = Buffer.from(p.bytes);
  const v = out.readUInt32BE(0);
  const hostMask = p.prefixLen === 0 ? 0xffffffff : (1 << (32 - p.prefixLen)) - 1;
  out.writeUInt32BE((v | hostMask) >>> 0, 0);
  return out;
}

/** "aa:bb:cc:dd:ee:ff" <-> 6 bytes (any length of colon-separated hex octets). */
export function parseMac(mac: string): Buffer {
  if (!/^[0-9a-f]{2}(:[0-9a-f]{2})+$/i.test(mac)) throw new TypeError(`invalid MAC address ${JSON.stringify(mac)}`);
  return Buffer.from(mac.split(':').map((x) => parseInt(x, 16)));
}

export const formatMac = (b: Buffer): string => [...b].map((x) => x.toString(16).padStart(2, '0')).join(':');
