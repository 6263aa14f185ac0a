/**
 * Pre-allocation arithmetic (Cilium pkg/ipam/node.go), pure. "available" = IPs in the node's pool,
 * "used" = IPs the agent handed out.
 */

/** IPs the node lacks to hold `preAllocate` free addresses (and at least `minAllocate` in total), capped by maxAllocate. */
export function calculateNeededIPs(available: number, used: number, preAllocate: number, minAllocate = 0, maxAllocate = 0): number {
  let needed = preAllocate - (available - used);
  if (minAllocate > 0) needed = Math.max(needed, minAllocate - available);
  if (maxAllocate > 0 && available + needed > maxAllocate) needed = maxAllocate - available;
  return Math.max(needed, 0);
}

/**
 * Free IPs beyond the watermark. Nothing is excess while both used and available stay within the initial
 * socket of minAllocate + maxAboveWatermark.
 */
export function calculateExcessIPs(available: number, used: number, preAllocate: number, minAllocate = 0, maxAboveWatermark = 0): number {
  if (used <= minAllocate + maxAboveWatermark && available <= minAllocate + maxAboveWatermark) return 0;
  return Math.max(available - used - preAllocate - maxAboveWatermark, 0);
}

export interface NodeIpamParams {
  preAllocate: number;
  minAllocate: number;
  maxAllocate: number;
  maxAboveWatermark: number;
}

export interface AllocationPlan {
  /** Deficit against the watermark (what orders nodes). */
  needed: number;
  /** Extra IPs for pods already scheduled to the node and waiting for an address. */
  surge: number;
  /** Free IPs beyond the watermark (candidates for release). */
  excess: number;
  /** IPs to ask EC2 for in this round: needed + maxAboveWatermark + surge, before the ENI/subnet caps. */
  toAllocate: number;
}

/**
 * The allocation decision for one node. Surge: pending pods count as used when computing the deficit, so a
 * burst of pods gets addresses in one round while the pre-allocate buffer is still there after they start
 * (Cilium adds "pending pods beyond needed" each round; counting them as used gives the same first round
 * without re-adding the same pending pods on every resync while they wait). Surge honours max-allocate.
 */
export function planAllocation(p: NodeIpamParams, available: number, used: number, pendingPods = 0): AllocationPlan {
  const needed = calculateNeededIPs(available, used, p.preAllocate, p.minAllocate, p.maxAllocate);
  const withSurge = calculateNeededIPs(available, used + Math.max(0, pendingPods), p.preAllocate, p.minAllocate, p.maxAllocate);
  const surge = Math.max(0, withSurge - needed);
  const excess = needed > 0 || surge > 0 ? 0 : calculateExcessIPs(available, used, p.preAllocate, p.minAllocate, p.maxAboveWatermark);
  let toAllocate = needed > 0 || surge > 0 ? needed + p.maxAboveWatermark + surge : 0;
  if (p.maxAllocate > 0) toAllocate = Math.min(toAllocate, Math.max(0, p.maxAllocate - available));
  return { needed, surge, excess, toAllocate };
}
