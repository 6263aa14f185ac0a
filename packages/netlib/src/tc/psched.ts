/**
 * Packet scheduler time units. tc structures express times in "ticks" whose length
 * the kernel publishes in /proc/net/psched (four hex words: ns per us, ns per tick,
 * clock resolution, hrtimer resolution); iproute2 converts the same way.
 */
import { readFileSync } from 'node:fs';

const USEC_PER_SEC = 1_000_000;
let ticksPerUsec: number | undefined;

/** Ticks per microsecond (15.625 on every kernel since 2.6.x: 64 ns ticks). */
export function tickInUsec(): number {
  if (ticksPerUsec === undefined) {
    let t2us = 1000;
    let us2t = 64;
    let clockRes = USEC_PER_SEC;
    try {
      const words = readFileSync('/proc/net/psched', 'utf8')
        .trim()
        .split(/\s+/)
        .map((w) => parseInt(w, 16));
      if (words.length >= 3 && words.every((w) => Number.isFinite(w) && w > 0)) [t2us, us2t, clockRes] = words as [number, number, number];
    } catch {
      // Not readable (unusual /proc): the defaults above are what every current kernel reports.
    }
    if (clockRes === 1_000_000_000) t2us = us2t;
    ticksPerUsec = (t2us / us2t) * (clockRes / USEC_PER_SEC);
  }
  return ticksPerUsec;
}

/** Microseconds -> ticks, truncated like iproute2's tc_core_time2tick. */
export const usecToTicks = (usec: number): number => Math.trunc(Math.trunc(usec) * tickInUsec());

/** Ticks needed to send `size` bytes at `rateBps` bytes per second (iproute2's tc_calc_xmittime). */
export const xmitTicks = (rateBps: number, size: number): number => usecToTicks((USEC_PER_SEC * size) / rateBps);
