/**
 * Which pods are clients of an Egress, from Pod objects alone: pure, unit-tested. A pod asks for
 * NAT with the annotation `egress.coil.cybozu.com/<egress namespace>: name1,name2`.
 */
import type { Pod } from '@cnikit/kube';
import { ip } from '@cnikit/netlib';
import { ANNOTATION_EGRESS_PREFIX } from './constants';

/** Whether a pod's annotations name this Egress. */
export function wantsEgress(pod: Pod, egressNamespace: string, egressName: string): boolean {
  const v = pod.metadata.annotations?.[`${ANNOTATION_EGRESS_PREFIX}${egressNamespace}`];
  if (!v) return false;
  return v.split(',').some((n) => n.trim() === egressName);
}

/**
 * The addresses of the Egress's client pods, canonical and sorted. Pods that share the node's
 * network, have finished, or have no address yet have nothing to tunnel to. Pods being
 * deleted stay clients until they are gone: graceful termination still sends traffic.
 */
export function clientAddresses(pods: Iterable<Pod>, egressNamespace: string, egressName: string): string[] {
  const out = new Set<string>();
  for (const p of pods) {
    if (p.spec?.hostNetwork || p.status?.phase === 'Succeeded' || p.status?.phase === 'Failed') continue;
    if (!wantsEgress(p, egressNamespace, egressName)) continue;
    const ips = p.status?.podIPs?.map((x) => x.ip) ?? (p.status?.podIP ? [p.status.podIP] : []);
    for (const a of ips) if (ip.isValidIp(a)) out.add(ip.canonicalIp(a));
  }
  return [...out].sort();
}

/** COIL_POD_ADDRESSES ("10.1.0.5,fd00::5") -> the pod's IPv4 and IPv6 address. */
export function parsePodAddresses(s: string): { podIPv4?: string; podIPv6?: string } {
  const out: { podIPv4?: string; podIPv6?: string } = {};
  for (const raw of s
    .split(',')
    .map((x) => x.trim())
    .filter(Boolean)) {
    if (!ip.isValidIp(raw))
      throw new TypeError(`COIL_POD_ADDRESSES: ${JSON.stringify(raw)} is not an IP address (expected e.g. "10.1.0.5,fd00::5")`);
    const a = ip.canonicalIp(raw);
    if (ip.familyOf(a) === 4) out.podIPv4 ??= a;
    else out.podIPv6 ??= a;
  }
  if (!out.podIPv4 && !out.podIPv6) throw new TypeError('COIL_POD_ADDRESSES: no address (expected e.g. "10.1.0.5,fd00::5")');
  return out;
}
