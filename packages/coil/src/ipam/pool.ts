/**
 * Pool arithmetic (pure): a pool's subnets cut into blocks of 2^blockSizeBits addresses, numbered across the
 * subnets in order (subnet 0's blocks first). A dual-stack subnet yields blocks holding one IPv4 and one
 * IPv6 range at the same index. The controller carves the next free index after the last one it used.
 */
import { ip } from '@cnikit/netlib';
import type { AddressPoolSpec } from '../api/types';

export interface BlockRange {
  index: number;
  ipv4?: string;
  ipv6?: string;
}

function subnetHostBits(s: { ipv4?: string; ipv6?: string }): number {
  if (s.ipv4) return 32 - ip.parseCidr(s.ipv4).prefix;
  return 128 - ip.parseCidr(s.ipv6!).prefix;
}

/** Blocks a subnet entry holds. */
export function subnetBlocks(s: { ipv4?: string; ipv6?: string }, blockSizeBits: number): number {
  const bits = subnetHostBits(s) - blockSizeBits;
  if (bits < 0) return 0;
  return bits > 30 ? 2 ** 30 : 2 ** bits;
}

/** How many blocks the pool holds (coil_controller_max_blocks). */
export function maxBlocks(spec: AddressPoolSpec): number {
  return spec.subnets.reduce((n, s) => n + subnetBlocks(s, spec.blockSizeBits), 0);
}

/** The ranges of block `index`, or undefined outside the pool. */
export function blockAt(spec: AddressPoolSpec, index: number): BlockRange | undefined {
  let i = index;
  for (const s of spec.subnets) {
    const n = subnetBlocks(s, spec.blockSizeBits);
    if (i < n) {
      const r: BlockRange = { index };
      if (s.ipv4) r.ipv4 = ip.nthBlock(ip.networkOf(s.ipv4), 32 - spec.blockSizeBits, i);
      if (s.ipv6) r.ipv6 = ip.nthBlock(ip.networkOf(s.ipv6), 128 - spec.blockSizeBits, i);
      return r;
    }
    i -= n;
  }
  return undefined;
}

/**
 * The index to carve next: the first free one after `last` (wrapping around), so a block just freed is not
 * handed out again at once. undefined when the pool is full.
 */
export function nextFreeIndex(total: number, used: ReadonlySet<number>, last: number): number | undefined {
  if (used.size >= total) return undefined;
  for (let k = 1; k <= total; k++) {
    const i = (last + k) % total;
    if (i >= 0 && !used.has(i)) return i;
  }
  return undefined;
}

/** Addresses in one block. */
export const blockSize = (blockSizeBits: number): number => 2 ** blockSizeBits;
