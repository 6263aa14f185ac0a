/**
 * CIDR arithmetic on (family, bigint) values. Every function takes and
 * returns strings in canonical form, validates its inputs strictly and has
 * no I/O, so IPAM logic built on it is unit-testable without root.
 */
import { AddressFormatError, BITS, type Family, formatIp, maskBits, parseCidrValue, parseIpValue, tryParseCidr, tryParseIp } from './parse';

export interface Cidr {
  /** Canonical address, host bits kept: "10.1.0.5". */
  address: string;
  prefix: number;
  family: Family;
  /** Canonical network in CIDR form: "10.1.0.0/24". */
  network: string;
}

/** The parsed parts plus the numeric range, shared by the functions below. */
interface Span {
  family: Family;
  prefix: number;
  value: bigint;
  first: bigint;
  last: bigint;
}

function span(cidr: string): Span {
  const c = parseCidrValue(cidr);
  const mask = maskBits(c.prefix, c.family);
  const first = c.value & mask;
  const last = first | (((1n << BigInt(BITS[c.family])) - 1n) ^ mask);
  return { family: c.family, prefix: c.prefix, value: c.value, first, last };
}

/** Parses "address/prefix" strictly (see parse.ts); throws AddressFormatError. */
export function parseCidr(cidr: string): Cidr {
  const s = span(cidr);
  return {
    address: formatIp(s.value, s.family),
    prefix: s.prefix,
    family: s.family,
    network: `${formatIp(s.first, s.family)}/${s.prefix}`,
  };
}

/** Parses a bare address; throws AddressFormatError. */
export function parseIp(ip: string): { address: string; family: Family } {
  const v = parseIpValue(ip);
  return { address: formatIp(v.value, v.family), family: v.family };
}

/** 4 or 6 for an address or a CIDR; throws AddressFormatError for anything else. */
export function familyOf(ipOrCidr: string): Family {
  const v = tryParseIp(ipOrCidr) ?? tryParseCidr(ipOrCidr);
  if (!v) throw new AddressFormatError('address or CIDR', 'an IPv4/IPv6 address, optionally with "/<prefix>"', ipOrCidr);
  return v.family;
}

export function canonicalIp(ip: string): string {
  return parseIp(ip).address;
}

/** "2001:DB8:0::5/64" -> "2001:db8::5/64"; host bits are kept. */
export function canonicalCidr(cidr: string): string {
  const c = parseCidr(cidr);
  return `${c.address}/${c.prefix}`;
}

/** "10.1.0.5/24" -> "10.1.0.0/24". */
export function networkOf(cidr: string): string {
  return parseCidr(cidr).network;
}

/** The last address of the network: the IPv4 broadcast, or the top of an IPv6 prefix. */
export function broadcast(cidr: string): string {
  const s = span(cidr);
  return formatIp(s.last, s.family);
}

/** True when the CIDR's address is not its network address ("10.1.0.5/24"). */
export function hasHostBits(cidr: string): boolean {
  const s = span(cidr);
  return s.value !== s.first;
}

/** Number of addresses in the network (2^(bits - prefix)), as a bigint: /0 of IPv6 is 2^128. */
export function size(cidr: string): bigint {
  const s = span(cidr);
  return s.last - s.first + 1n;
}

/**
 * True when `ipOrCidr` lies inside `cidr`'s network: an address, or a whole
 * network (its every address). Different families never contain each other.
 */
export function contains(cidr: string, ipOrCidr: string): boolean {
  const outer = span(cidr);
  const ip = tryParseIp(ipOrCidr);
  if (ip) return ip.family === outer.family && ip.value >= outer.first && ip.value <= outer.last;
  const inner = span(ipOrCidr);
  return inner.family === outer.family && inner.first >= outer.first && inner.last <= outer.last;
}

/** True when the two networks share at least one address. */
export function overlaps(a: string, b: string): boolean {
  const x = span(a);
  const y = span(b);
  return x.family === y.family && x.first <= y.last && y.first <= x.last;
}

/**
 * The n-th address of the network, counted from the network address (0);
 * a negative n counts back from the last address (-1). RangeError outside.
 */
export function nthAddress(cidr: string, n: number | bigint): string {
  const s = span(cidr);
  const i = toBigInt(n, 'n');
  const v = i >= 0n ? s.first + i : s.last + 1n + i;
  if (v < s.first || v > s.last) {
    throw new RangeError(`ip: address #${i} is outside ${formatIp(s.first, s.family)}/${s.prefix} (${s.last - s.first + 1n} addresses)`);
  }
  return formatIp(v, s.family);
}

/** Position of `ip` in the network (0 = network address), for bitmap allocators; RangeError when outside. */
export function indexOf(cidr: string, ip: string): bigint {
  const s = span(cidr);
  const v = parseIpValue(ip);
  if (v.family !== s.family || v.value < s.first || v.value > s.last) {
    throw new RangeError(`ip: ${ip} is not in ${formatIp(s.first, s.family)}/${s.prefix}`);
  }
  return v.value - s.first;
}

/**
 * First assignable address, as host-local does it: network + 1, except that
 * /31 and /32 (/127, /128) have no network address to skip (RFC 3021).
 */
export function firstHost(cidr: string): string {
  const s = span(cidr);
  const hostBits = BITS[s.family] - s.prefix;
  return formatIp(hostBits <= 1 ? s.first : s.first + 1n, s.family);
}

/**
 * Last assignable address, as host-local does it: the IPv4 broadcast is
 * skipped (except in /31 and /32); IPv6 has no broadcast, the last address is usable.
 */
export function lastHost(cidr: string): string {
  const s = span(cidr);
  const hostBits = BITS[s.family] - s.prefix;
  return formatIp(s.family === 4 && hostBits > 1 ? s.last - 1n : s.last, s.family);
}

/** Orders addresses numerically, IPv4 before IPv6. */
export function compareIps(a: string, b: string): number {
  const x = parseIpValue(a);
  const y = parseIpValue(b);
  if (x.family !== y.family) return x.family - y.family;
  return x.value < y.value ? -1 : x.value > y.value ? 1 : 0;
}

export function ipToBigInt(ip: string): bigint {
  return parseIpValue(ip).value;
}

export function bigIntToIp(value: bigint, family: Family): string {
  if (value < 0n || value >= 1n << BigInt(BITS[family])) throw new RangeError(`ip: ${value} is not an IPv${family} address value`);
  return formatIp(value, family);
}

/** The address n positions after `ip` (before, for negative n); RangeError past the family's ends. */
export function offsetIp(ip: string, n: number | bigint): string {
  const v = parseIpValue(ip);
  return bigIntToIp(v.value + toBigInt(n, 'n'), v.family);
}

export function nextIp(ip: string): string {
  return offsetIp(ip, 1n);
}

export function prevIp(ip: string): string {
  return offsetIp(ip, -1n);
}

/** "255.255.255.0" for 24; for IPv6 the mask in IPv6 notation ("ffff:ffff::" for 32). */
export function prefixToMask(prefix: number, family: Family = 4): string {
  if (!Number.isInteger(prefix) || prefix < 0 || prefix > BITS[family]) {
    throw new RangeError(`ip: prefix length ${prefix} is outside 0-${BITS[family]} for IPv${family}`);
  }
  return formatIp(maskBits(prefix, family), family);
}

/** How many /blockPrefix blocks the pool holds; RangeError when blockPrefix is shorter than the pool's. */
export function blockCount(pool: string, blockPrefix: number): bigint {
  const s = span(pool);
  checkBlockPrefix(s, blockPrefix);
  return 1n << BigInt(blockPrefix - s.prefix);
}

/** The i-th /blockPrefix block of the pool, as a network CIDR; negative i counts from the end. */
export function nthBlock(pool: string, blockPrefix: number, i: number | bigint): string {
  const s = span(pool);
  checkBlockPrefix(s, blockPrefix);
  const count = 1n << BigInt(blockPrefix - s.prefix);
  let idx = toBigInt(i, 'i');
  if (idx < 0n) idx += count;
  if (idx < 0n || idx >= count)
    throw new RangeError(
      `ip: block #${i} is outside ${formatIp(s.first, s.family)}/${s.prefix} split into ${count} /${blockPrefix} blocks`,
    );
  const blockSize = 1n << BigInt(BITS[s.family] - blockPrefix);
  return `${formatIp(s.first + idx * blockSize, s.family)}/${blockPrefix}`;
}

/** Index of the /blockPrefix block of the pool that holds `ip`; RangeError when outside the pool. */
export function blockIndexOf(pool: string, blockPrefix: number, ip: string): bigint {
  const s = span(pool);
  checkBlockPrefix(s, blockPrefix);
  return indexOf(pool, ip) >> BigInt(BITS[s.family] - blockPrefix);
}

/**
 * All /blockPrefix blocks of the pool, in order. Refuses (RangeError) to
 * build more than `max` (default 65536) strings: use blockCount/nthBlock to
 * walk a huge IPv6 split lazily.
 */
export function splitCidr(pool: string, blockPrefix: number, opts: { max?: number } = {}): string[] {
  const s = span(pool);
  checkBlockPrefix(s, blockPrefix);
  const count = 1n << BigInt(blockPrefix - s.prefix);
  const max = opts.max ?? 65536;
  if (count > BigInt(max))
    throw new RangeError(`ip: splitting ${pool} into /${blockPrefix} gives ${count} blocks, more than the limit ${max}`);
  const blockSize = 1n << BigInt(BITS[s.family] - blockPrefix);
  const out: string[] = [];
  for (let v = s.first; v <= s.last; v += blockSize) out.push(`${formatIp(v, s.family)}/${blockPrefix}`);
  return out;
}

function checkBlockPrefix(s: Span, blockPrefix: number): void {
  if (!Number.isInteger(blockPrefix) || blockPrefix < s.prefix || blockPrefix > BITS[s.family]) {
    throw new RangeError(
      `ip: block prefix length must be an integer in ${s.prefix}-${BITS[s.family]} for a /${s.prefix} IPv${s.family} pool, got ${blockPrefix}`,
    );
  }
}

function toBigInt(n: number | bigint, name: string): bigint {
  if (typeof n === 'bigint') return n;
  if (!Number.isSafeInteger(n)) throw new RangeError(`ip: ${name} must be an integer, got ${n}`);
  return BigInt(n);
}
