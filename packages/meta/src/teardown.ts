/**
 * What the meta-plugins' DEL paths share: the pod's netns when it still
 * exists, the attachment's addresses from prevResult or from the pod, and
 * "absent is fine" for kernel objects. DEL must succeed when the netns, the
 * interface or any object is already gone, and when prevResult is missing.
 */
import { addr, isNotFoundError, link, type Netns, type Result } from '@cnikit/netlib';
import { podIPsOf } from './pod-ips';

/** Awaits `p`; an error saying the object is absent (by class, never by message) is success. */
export async function ignoreNotFound(p: Promise<unknown>): Promise<void> {
  try {
    await p;
  } catch (e) {
    if (!isNotFoundError(e)) throw e;
  }
}

/** Plain global addresses of `ifName` in the pod; [] when the netns or the link is gone. */
export async function linkIPs(podNs: Netns | undefined, ifName: string): Promise<string[]> {
  if (podNs === undefined) return [];
  const l = await link.find(podNs, ifName);
  if (l === undefined) return [];
  return (await addr.list(podNs, { index: l.index })).filter((a) => a.scope === 0).map((a) => a.address.split('/')[0]!);
}

/** The attachment's IPs: from prevResult when the runtime sent it, else read from the pod. */
export async function attachmentIPs(prev: Result | undefined, podNs: Netns | undefined, ifName: string): Promise<string[]> {
  if (prev !== undefined) {
    const ips = podIPsOf(prev, ifName);
    if (ips.length > 0) return ips;
  }
  return linkIPs(podNs, ifName);
}
