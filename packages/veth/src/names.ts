/**
 * Names and tags the veth plugin leaves in the kernel. They are its only
 * state: DEL, CHECK and GC find everything from them, no side files.
 */
import { sha256 } from './sha256';

/** The pod end of the pair. Shared by every chained interface of the pod. */
export const POD_VETH = 'veth0';

/** Host end: "veth" + the first 11 characters of the container ID (15 chars, IFNAMSIZ-1). */
export function hostVethName(containerId: string): string {
  return `veth${containerId.slice(0, 11)}`;
}

const ALIAS_PREFIX = 'cnikit-veth';

/**
 * Alias set on the host end (IFLA_IFALIAS): marks the link as ours, for
 * which network and which container, so GC never touches other veths.
 */
export function hostVethAlias(netName: string, containerId: string): string {
  return `${ALIAS_PREFIX}:${netName}:${containerId}`;
}

/**
 * Whether host end `l` belongs to `containerId`. Its name holds only 11 characters of the ID, so
 * another container's pair may carry it (cnitool's IDs share "cnitool-"; a re-created sandbox's
 * predecessor may have the same prefix): our alias names the container; a pair whose ADD was killed
 * before the alias was set still has the MAC derived from the whole ID.
 */
export function ownsHostVeth(l: { alias?: string; mac?: string }, containerId: string): boolean {
  if (l.alias) return l.alias.startsWith(`${ALIAS_PREFIX}:`) && l.alias.endsWith(`:${containerId}`);
  return l.mac === hostVethMac(containerId);
}

/** Container ID of a host veth of `netName`, or undefined when the alias is not ours. */
export function containerOfAlias(alias: string | undefined, netName: string): string | undefined {
  const prefix = `${ALIAS_PREFIX}:${netName}:`;
  return alias !== undefined && alias.startsWith(prefix) ? alias.slice(prefix.length) : undefined;
}

/**
 * A stable, locally administered unicast MAC for the host end. Setting it
 * explicitly stops systemd-udevd's MACAddressPolicy from rewriting it after
 * we have published it in the pod's neighbour table.
 */
export function hostVethMac(containerId: string): string {
  // Our own SHA-256, not node:crypto: loading that costs ~4 ms per ADD (see sha256.ts).
  const h = sha256(`host:${containerId}`);
  h[0] = (h[0]! & 0xfe) | 0x02;
  return [...h.subarray(0, 6)].map((b) => b.toString(16).padStart(2, '0')).join(':');
}
