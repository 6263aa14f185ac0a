/**
 * Exclusive ENI (Terway's "ENI" mode): the ENI itself moves into the pod as
 * its eth0 (the pod owns the VPC address, default route via the vSwitch
 * gateway), plus a veth to the host for Service traffic (kube-proxy lives on
 * the host):
 *
 *   pod:  eth0 = the ENI, <ip>/<vSwitch prefix>, default via <gateway>
 *         veth1: 169.254.1.1 dev veth1 scope link, PERMANENT neigh -> host veth MAC,
 *                each Service CIDR via 169.254.1.1 dev veth1 onlink
 *   host: cali<sha1(ns.name)[:11]>, <ip>/32 dev cali… scope link
 *
 * The ENI's host name is kept in its alias (`terway-eni:<name>`) so teardown
 * can give it back under the same name: the kernel holds the state.
 */
import { addr, isExistsError, isNotFoundError, link, neigh, route, UndoStack, type Netns } from '@cnikit/netlib';
import { findEniLink, hostVethName, POD_GATEWAY } from './eniip-veth';

const SCOPE_LINK = 253;
const ALIAS_PREFIX = 'terway-eni:';
export const SERVICE_IF = 'veth1';

export interface ExclusivePod {
  podNamespace: string;
  podName: string;
  ifName: string;
  eni: { mac: string; ip: string; prefix: number; gateway: string };
  serviceCidrs: string[];
  mtu?: number;
}

async function findByMac(ns: Netns, mac: string): Promise<link.Link | undefined> {
  const want = mac.toLowerCase();
  return (await link.list(ns)).find((l) => l.mac.toLowerCase() === want);
}

export async function setupExclusivePod(hostNs: Netns, podNs: Netns, p: ExclusivePod): Promise<{ hostVeth: string; eniName: string }> {
  const undo = new UndoStack();
  try {
    // A repeated ADD: the ENI may already sit in the pod, the host veth exist. Start over.
    await giveBack(podNs, hostNs, p.eni.mac);
    const stale = await link.find(hostNs, hostVethName(p.podNamespace, p.podName));
    if (stale) await link.del(hostNs, stale.index);
    const eni = await findEniLink(hostNs, p.eni.mac);
    const original = eni.name;
    await link.setDown(hostNs, eni.index);
    await link.setAlias(hostNs, eni.index, `${ALIAS_PREFIX}${original}`);
    await link.moveToNetns(hostNs, eni.index, podNs);
    undo.push(`give ${original} back`, async () => void (await giveBack(podNs, hostNs, p.eni.mac)));
    const inPod = (await findByMac(podNs, p.eni.mac))!;
    if (inPod.name !== p.ifName) await link.rename(podNs, inPod.index, p.ifName);
    if (p.mtu) await link.setMtu(podNs, inPod.index, p.mtu);
    await link.setUp(podNs, inPod.index);
    await link.setUp(podNs, 'lo').catch(() => undefined);
    await addr.add(podNs, inPod.index, `${p.eni.ip}/${p.eni.prefix}`);
    await route.add(podNs, { dst: 'default', gw: p.eni.gateway, oif: inPod.index });

    const name = hostVethName(p.podNamespace, p.podName);
    const { link: host, peer } = await link.addVeth(hostNs, { name, peerName: SERVICE_IF, peerNs: podNs, mtu: p.mtu ?? 1500 });
    undo.push(`delete ${name}`, async () => {
      try {
        await link.del(hostNs, name);
      } catch (e) {
        if (!isNotFoundError(e)) throw e;
      }
    });
    await link.setUp(podNs, peer.index);
    await link.setUp(hostNs, host.index);
    await route.add(podNs, { dst: `${POD_GATEWAY}/32`, oif: peer.index, scope: SCOPE_LINK });
    await neigh.add(podNs, { index: peer.index, ip: POD_GATEWAY, mac: host.mac });
    for (const cidr of p.serviceCidrs) await route.add(podNs, { dst: cidr, gw: POD_GATEWAY, oif: peer.index, onlink: true, src: p.eni.ip });
    await route.replace(hostNs, { dst: `${p.eni.ip}/32`, oif: host.index, scope: SCOPE_LINK });
    try {
      await neigh.add(hostNs, { index: host.index, ip: p.eni.ip, mac: peer.mac });
    } catch (e) {
      if (!isExistsError(e)) throw e;
    }
    undo.commit();
    return { hostVeth: name, eniName: original };
  } catch (e) {
    await undo.unwind();
    throw e;
  }
}

/** Moves the ENI out of the pod under its original host name (from its alias), down. */
async function giveBack(podNs: Netns, hostNs: Netns, mac: string): Promise<boolean> {
  const l = await findByMac(podNs, mac);
  if (!l) return false;
  const original = l.alias?.startsWith(ALIAS_PREFIX) ? l.alias.slice(ALIAS_PREFIX.length) : undefined;
  await link.setDown(podNs, l.index);
  if (original && original !== l.name) await link.rename(podNs, l.index, original);
  await link.setAlias(podNs, l.index, '');
  await link.moveToNetns(podNs, l.index, hostNs);
  return true;
}

/** An ENI moved into a pod by setupExclusivePod (its alias keeps its host name). */
export function isExclusiveEniLink(l: link.Link): boolean {
  return l.alias?.startsWith(ALIAS_PREFIX) === true;
}

/**
 * The pod's side only (a stale DEL of an older sandbox): the ENI back to the host if this netns
 * holds it, the Service veth deleted from inside (its host end goes with it). Idempotent.
 */
export async function releaseExclusiveNetns(hostNs: Netns, podNs: Netns, mac: string): Promise<void> {
  await giveBack(podNs, hostNs, mac);
  const veth = await link.find(podNs, SERVICE_IF);
  if (veth?.kind === 'veth') {
    try {
      await link.del(podNs, veth.index);
    } catch (e) {
      if (!isNotFoundError(e)) throw e;
    }
  }
}

/** DEL: the ENI back to the host (if the pod netns still holds it), the host veth gone. Idempotent. */
export async function teardownExclusivePod(
  hostNs: Netns,
  podNs: Netns | undefined,
  p: { podNamespace: string; podName: string; mac: string },
): Promise<void> {
  if (podNs) await giveBack(podNs, hostNs, p.mac);
  try {
    await link.del(hostNs, hostVethName(p.podNamespace, p.podName));
  } catch (e) {
    if (!isNotFoundError(e)) throw e;
  }
}
