/**
 * How router recognises its own objects in the kernel. These marks are its
 * only state: DEL, CHECK and GC find everything from them, no side files.
 *
 * - Every route router adds, on the host and in the pod, carries the route
 *   protocol RTPROT_ROUTER (`ip route show proto 158`). Routes it moves
 *   between tables keep their own protocol (kernel, boot, ra...), which is how
 *   they are told apart from the routes it created.
 * - A host route also carries, as its metric, the attachment key: 12 bits of
 *   the network name's hash, then 20 bits of the hash of containerID/ifname.
 *   DEL finds an attachment's host routes from the key alone (netns gone and
 *   no prevResult), GC keeps the keys of the live attachments of its network
 *   and never touches routes of another network. The metric of a /32 or /128
 *   route that nothing else covers does not change how packets are routed.
 * - Pod rules live at fixed priorities: HIJACK_PRIORITY for `to <subnet>`
 *   rules, and the table number for the `from <ip>` rules of a table (the
 *   convention of @cnikit/meta, shared with veth).
 * - The host rule that sends lookups to host_rule_table has priority
 *   HOST_RULE_PRIORITY and no selector.
 */
import { rulePriorityForTable, tableForInterface } from '@cnikit/meta';

/** Route protocol of router's routes; add `158 cnikit-router` to /etc/iproute2/rt_protos.d/ to see the name. */
export const RTPROT_ROUTER = 158;

/** Priority of the pod's `to <hijacked subnet or host IP> lookup <overlay table>` rules: before every `from` rule. */
export const HIJACK_PRIORITY = 90;

/** Priority of the host's `lookup <host_rule_table>` rule. */
export const HOST_RULE_PRIORITY = 1000;

/**
 * The pod table that holds the overlay interface's routes once the chained NIC
 * owns main, and the routes towards the host and the hijacked subnets:
 * 100+N-1 for the overlay's name (eth0 -> 99), so it never collides with the
 * own tables of net1 (100) and net2 (101).
 */
export const overlayTable = (overlayInterface: string): number => tableForInterface(overlayInterface);

/** Table and rule priority of a chained NIC that keeps its own routes apart (net1 -> 100, net2 -> 101). */
export const ownTable = (ifName: string): number => tableForInterface(ifName);
export const fromPriority = (table: number): number => rulePriorityForTable(table);

function fnv1a(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

const NET_BITS = 12;
const ATTACHMENT_BITS = 32 - NET_BITS;

/** The network part of an attachment key. */
export const networkTag = (netName: string): number => fnv1a(`net\0${netName}`) >>> ATTACHMENT_BITS;

/** The metric router puts on the host routes of one attachment (never 0: 0 means "unset" to the kernel). */
export function attachmentKey(netName: string, containerId: string, ifName: string): number {
  const att = fnv1a(`${containerId}\0${ifName}`) & ((1 << ATTACHMENT_BITS) - 1);
  const key = ((networkTag(netName) << ATTACHMENT_BITS) | att) >>> 0;
  return key === 0 ? 1 : key;
}

/** The network tag of a host route's metric. */
export const networkTagOfKey = (key: number): number => key >>> ATTACHMENT_BITS;
