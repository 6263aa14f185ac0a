/**
 * Tunnel device names. A device is named after its peer so that the kernel alone tells which
 * peer a device serves (reconcile and read-back need no other record). IPv4: the address in
 * hex ("fou4_0a000001"); IPv6 addresses do not fit IFNAMSIZ, so 4 bytes of their SHA-1.
 */
import { createHash } from 'node:crypto';
import { ip } from '@cnikit/netlib';

export const FOU4_PREFIX = 'fou4_';
export const FOU6_PREFIX = 'fou6_';

/** The tunnel device name for a peer address (IPv4 or IPv6). AddressFormatError on a malformed address. */
export function fouLinkName(peer: string): string {
  const p = ip.parseIp(peer);
  if (p.family === 4) {
    const hex = p.address
      .split('.')
      .map((o) => Number(o).toString(16).padStart(2, '0'))
      .join('');
    return `${FOU4_PREFIX}${hex}`;
  }
  return `${FOU6_PREFIX}${createHash('sha1').update(ipv6Bytes(p.address)).digest('hex').slice(0, 8)}`;
}

/** True for names this module gives to tunnels (the catch-all receivers are not included). */
export const isFouLinkName = (name: string): boolean => /^fou[46]_[0-9a-f]{8}$/.test(name);

/** The 16 bytes of a canonical IPv6 address. */
function ipv6Bytes(addr: string): Buffer {
  const n = ip.ipToBigInt(addr);
  const b = Buffer.alloc(16);
  b.writeBigUInt64BE(n >> 64n, 0);
  b.writeBigUInt64BE(n & 0xffffffffffffffffn, 8);
  return b;
}
