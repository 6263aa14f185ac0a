/**
 * VPC route mode (Terway's "VPC" daemon mode): every node owns a pod CIDR that
 * the VPC route table sends to it; pods get addresses of that CIDR and a veth:
 *
 *   pod:  eth0 podIP/32; 169.254.1.1 dev eth0 scope link; default via
 *         169.254.1.1 dev eth0 onlink; PERMANENT 169.254.1.1 -> host veth MAC
 *   host: veth cali<sha1(ns.name)[:11]>; podIP/32 dev cali* scope link (main);
 *         PERMANENT podIP -> pod eth0 MAC; forwarding=1, rp_filter=0
 *   bandwidth: tbf on the pod eth0 (egress) and the host veth (ingress)
 *
 * No policy routing: traffic leaves by the host's own default route (the
 * primary NIC) and the VPC route table brings replies for the pod CIDR back.
 */
import { ignoreNotFound, link, neigh, route, sysctl, UndoStack, type Netns } from '@cnikit/netlib';
import { setRate, type BandwidthLimits } from './bandwidth';
import { addPodVeth, checkPodInterface, hostVethName, POD_GATEWAY, type PodVeth } from './eniip-veth';

const SCOPE_LINK = 253;

export interface VpcRoutePod {
  podNamespace: string;
  podName: string;
  ifName: string;
  ip: string;
  bandwidth?: BandwidthLimits;
  mtu?: number;
}

export type VpcRouteSetup = PodVeth;

/**
 * ADD. Idempotent: a leftover host veth of the same pod (a repeated ADD) is
 * replaced, and the pod interface with it. A failure undoes what was done.
 */
export async function setupVpcRoutePod(hostNs: Netns, podNs: Netns, p: VpcRoutePod): Promise<VpcRouteSetup> {
  const undo = new UndoStack();
  const name = hostVethName(p.podNamespace, p.podName);
  try {
    const { host, peer } = await addPodVeth(hostNs, podNs, undo, { ...p, name });
    sysctl.set(hostNs, 'net/ipv4/ip_forward', 1);
    sysctl.set(hostNs, 'net/ipv4/conf/all/rp_filter', 0);
    sysctl.set(hostNs, `net/ipv4/conf/${name}/rp_filter`, 0);
    await route.replace(hostNs, { dst: `${p.ip}/32`, oif: host.index, scope: SCOPE_LINK });
    await neigh.replace(hostNs, { index: host.index, ip: p.ip, mac: peer.mac });
    if (p.bandwidth?.egressBps) await setRate(podNs, peer.index, p.bandwidth.egressBps);
    if (p.bandwidth?.ingressBps) await setRate(hostNs, host.index, p.bandwidth.ingressBps);
    undo.commit();
    return { hostVeth: name, hostVethIndex: host.index, hostVethMac: host.mac, podMac: peer.mac };
  } catch (e) {
    await undo.unwind();
    throw e;
  }
}

/** DEL: the host route and the veth (the pod end goes with it). Idempotent. */
export async function teardownVpcRoutePod(hostNs: Netns, p: { podNamespace: string; podName: string; ip?: string }): Promise<void> {
  const name = hostVethName(p.podNamespace, p.podName);
  const l = await link.find(hostNs, name);
  if (p.ip && l) await ignoreNotFound(route.del(hostNs, { dst: `${p.ip}/32`, oif: l.index }));
  if (l) await ignoreNotFound(link.del(hostNs, l.index));
}

/** CHECK: the problems found (empty when all is as ADD left it). */
export async function checkVpcRoutePod(
  hostNs: Netns,
  podNs: Netns,
  p: { podNamespace: string; podName: string; ifName: string; ip: string },
): Promise<string[]> {
  const problems: string[] = [];
  const name = hostVethName(p.podNamespace, p.podName);
  const host = await link.find(hostNs, name);
  const cidr = `${p.ip}/32`;
  if (!host) problems.push(`host veth ${name} is missing`);
  else {
    if (!host.up) problems.push(`host veth ${name} is down`);
    if (!(await route.list(hostNs, { family: 4 })).some((r) => r.dst === cidr && r.oif === host.index))
      problems.push(`host route ${cidr} dev ${name} is missing`);
  }
  const pod = await checkPodInterface(podNs, p.ifName, cidr, problems);
  if (
    pod &&
    host &&
    !(await neigh.list(podNs, { index: pod.index })).some((n) => n.ip === POD_GATEWAY && n.mac?.toLowerCase() === host.mac.toLowerCase())
  )
    problems.push(`pod neighbour ${POD_GATEWAY} -> ${host.mac} is missing`);
  return problems;
}
