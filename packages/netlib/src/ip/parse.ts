/**
 * Strict parsing of IP addresses and CIDRs into (family, bigint) pairs, and
 * canonical formatting back.
 *
 * IPv4 is parsed here: it is the common case on the plugin hot path and a
 * regex costs nothing, while loading `ip-address` costs several milliseconds
 * of start-up. IPv6 text (compression, embedded IPv4) goes through
 * `ip-address`, loaded on first use. Stricter than `ip-address` alone: no
 * zones ("%eth0"), no leading zeros in IPv4 octets or prefix lengths, no
 * surrounding whitespace, exactly one "/" in a CIDR.
 */
import type * as IpAddressModule from 'ip-address';

export type Family = 4 | 6;

/** An address as a number, with its family. */
export interface IpValue {
  family: Family;
  value: bigint;
}

/** An input that is not an address or CIDR of the expected form. */
export class AddressFormatError extends TypeError {
  readonly input: unknown;
  constructor(what: string, expected: string, input: unknown) {
    super(`ip: invalid ${what} ${JSON.stringify(input)}: expected ${expected}`);
    this.name = 'AddressFormatError';
    this.input = input;
  }
}

export const BITS: Record<Family, number> = { 4: 32, 6: 128 };

let ipAddress: typeof IpAddressModule | undefined;
/** ip-address is only needed for IPv6; load it on first use to keep plugin start-up cheap. */
function lib(): typeof IpAddressModule {
  ipAddress ??= require('ip-address') as typeof IpAddressModule;
  return ipAddress;
}

const V4_RE =
  /^(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)$/;
const V6_CHARS_RE = /^[0-9a-fA-F:.]+$/;
const PREFIX_RE = /^(0|[1-9]\d{0,2})$/;
const MAPPED_PREFIX = 0xffffn << 32n;

/** Parses a bare address (no prefix); undefined when it is not one. */
export function tryParseIp(s: unknown): IpValue | undefined {
  if (typeof s !== 'string') return undefined;
  const m = V4_RE.exec(s);
  if (m) {
    return { family: 4, value: BigInt(((+m[1] << 24) >>> 0) + (+m[2] << 16) + (+m[3] << 8) + +m[4]) };
  }
  if (!s.includes(':') || !V6_CHARS_RE.test(s)) return undefined;
  const { Address6 } = lib();
  try {
    const a = new Address6(s);
    // Embedded IPv4 must obey the same rules as plain IPv4 (no leading zeros).
    const dotted = s.slice(s.lastIndexOf(':') + 1);
    if (dotted.includes('.') && !V4_RE.test(dotted)) return undefined;
    return { family: 6, value: a.bigInt() };
  } catch {
    return undefined;
  }
}

/** Parses "address/prefix"; undefined when it is not a valid CIDR. */
export function tryParseCidr(s: unknown): (IpValue & { prefix: number }) | undefined {
  if (typeof s !== 'string') return undefined;
  const slash = s.indexOf('/');
  if (slash < 0 || slash !== s.lastIndexOf('/')) return undefined;
  const prefixText = s.slice(slash + 1);
  if (!PREFIX_RE.test(prefixText)) return undefined;
  const ip = tryParseIp(s.slice(0, slash));
  if (!ip) return undefined;
  const prefix = Number(prefixText);
  if (prefix > BITS[ip.family]) return undefined;
  return { ...ip, prefix };
}

export function isValidIp(s: unknown): s is string {
  return tryParseIp(s) !== undefined;
}

export function isValidCidr(s: unknown): s is string {
  return tryParseCidr(s) !== undefined;
}

export function parseIpValue(s: unknown): IpValue {
  const ip = tryParseIp(s);
  if (!ip) throw new AddressFormatError('IP address', 'dotted IPv4 like "10.1.0.5" or IPv6 like "fd00::5", without prefix or zone', s);
  return ip;
}

export function parseCidrValue(s: unknown): IpValue & { prefix: number } {
  const c = tryParseCidr(s);
  if (!c)
    throw new AddressFormatError('CIDR', '<address>/<prefix> like "10.1.0.0/24" or "fd00::/64", prefix 0-32 for IPv4, 0-128 for IPv6', s);
  return c;
}

/**
 * The canonical text of an address: dotted decimal for IPv4, RFC 5952 for
 * IPv6 (lower case, longest zero run compressed, IPv4-mapped addresses in
 * mixed notation "::ffff:10.1.0.5" as §5 recommends and iproute2 prints).
 */
export function formatIp(value: bigint, family: Family): string {
  if (family === 4) {
    const n = Number(value);
    return `${n >>> 24}.${(n >>> 16) & 255}.${(n >>> 8) & 255}.${n & 255}`;
  }
  if (value >> 32n === MAPPED_PREFIX >> 32n) return `::ffff:${formatIp(value & 0xffffffffn, 4)}`;
  return lib().Address6.fromBigInt(value).correctForm();
}

/** A mask of `prefix` leading one bits in a `family` address. */
export function maskBits(prefix: number, family: Family): bigint {
  const bits = BigInt(BITS[family]);
  const all = (1n << bits) - 1n;
  return (all << (bits - BigInt(prefix))) & all;
}
