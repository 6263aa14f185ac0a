/**
 * Pod bandwidth as Terway does it: a root tbf (latency 25 ms) on the pod-side
 * veth for egress and on the host veth for ingress. Limits come from the
 * `k8s.aliyun.com/ingress-bandwidth` / `egress-bandwidth` annotations or the
 * standard CNI `bandwidth` capability (runtimeConfig.bandwidth, bits/s).
 */
import { ConfigError, isNotFoundError, tc, type Netns } from '@cnikit/netlib';

export const INGRESS_ANNOTATION = 'k8s.aliyun.com/ingress-bandwidth';
export const EGRESS_ANNOTATION = 'k8s.aliyun.com/egress-bandwidth';

const SUFFIX: Record<string, number> = { '': 1, k: 1e3, M: 1e6, G: 1e9, T: 1e12, Ki: 1024, Mi: 1024 ** 2, Gi: 1024 ** 3, Ti: 1024 ** 4 };

/** A Kubernetes quantity in bits per second ("10M", "512Ki", "1.5G"). */
export function parseBandwidth(field: string, v: string): number {
  const m = /^(\d+(?:\.\d+)?)(k|M|G|T|Ki|Mi|Gi|Ti)?$/.exec(v.trim());
  if (!m) throw new ConfigError(field, 'a bandwidth quantity like "10M" or "512Ki" (bits per second)', v);
  const bits = Number(m[1]) * SUFFIX[m[2] ?? '']!;
  if (bits < 1000 || bits > 1e15) throw new ConfigError(field, 'between 1k and 1P bits per second', v);
  return Math.round(bits);
}

export interface BandwidthLimits {
  /** Into the pod, bits/s. */
  ingressBps?: number;
  /** Out of the pod, bits/s. */
  egressBps?: number;
}

/** Annotations first, then the CNI capability (`ingressRate` / `egressRate` in bits/s). */
export function bandwidthFrom(
  annotations: Record<string, string> | undefined,
  capability?: { ingressRate?: number; egressRate?: number },
): BandwidthLimits {
  const out: BandwidthLimits = {};
  const ing = annotations?.[INGRESS_ANNOTATION];
  const eg = annotations?.[EGRESS_ANNOTATION];
  if (ing) out.ingressBps = parseBandwidth(`annotation ${INGRESS_ANNOTATION}`, ing);
  else if (capability?.ingressRate) out.ingressBps = capability.ingressRate;
  if (eg) out.egressBps = parseBandwidth(`annotation ${EGRESS_ANNOTATION}`, eg);
  else if (capability?.egressRate) out.egressBps = capability.egressRate;
  return out;
}

/**
 * tbf parameters for a rate in bits/s: burst = 1/50 s of traffic, at least
 * 8 full frames (a smaller bucket cannot reach the rate with TSO-sized
 * packets), latency 25 ms as in Terway.
 */
export function tbfFor(bps: number): { rateBps: number; burstBytes: number; latencyUs: number } {
  const rateBps = Math.max(1, Math.round(bps / 8));
  return { rateBps, burstBytes: Math.max(Math.round(rateBps / 50), 8 * 1514), latencyUs: 25_000 };
}

/** Replaces the root qdisc of `index` with a tbf for `bps`, or removes it when undefined. */
export async function setRate(ns: Netns, index: number, bps: number | undefined): Promise<void> {
  try {
    await tc.delRootQdisc(ns, index);
  } catch (e) {
    if (!isNotFoundError(e) && !/EINVAL/.test(String((e as Error).message))) throw e;
  }
  if (bps !== undefined) await tc.addTbf(ns, index, tbfFor(bps));
}
