/**
 * veth DEL and GC. Everything on the host hangs off the host end of the pair
 * (its routes and neighbour entries), so deleting that link removes them
 * all; when the pod has several chained interfaces on one pair, DEL of one
 * removes only that interface's host routes, neighbours, rules and table.
 * Absent netns, links, routes and rules are fine: DEL is idempotent.
 */
import { hostNetns, link, neigh, route, rule, type Netns, type Result } from '@cnikit/netlib';
import { attachmentIPs, familyOf, hostCidr, ignoreNotFound, rulePriorityForTable, tableForInterface } from '@cnikit/meta';
import { containerOfAlias, hostVethName, ownsHostVeth } from './names';

/** Removes the interface's `from <ip>` rules and its table's routes in the pod. */
async function cleanPodTable(podNs: Netns, ifName: string): Promise<void> {
  const table = tableForInterface(ifName);
  for (const family of [4, 6] as const) {
    for (const r of await rule.list(podNs, family)) {
      if (r.table !== table || r.priority !== rulePriorityForTable(table)) continue;
      await ignoreNotFound(rule.del(podNs, r));
    }
    for (const r of await route.list(podNs, { family, table })) {
      if (r.table !== table) continue;
      await ignoreNotFound(route.del(podNs, r));
    }
  }
}

export async function delVeth(opts: {
  containerId: string;
  ifName: string;
  podNs: Netns | undefined;
  prev: Result | undefined;
  log: (msg: string, fields?: Record<string, unknown>) => void;
}): Promise<void> {
  const hostNs = hostNetns();
  const ips = await attachmentIPs(opts.prev, opts.podNs, opts.ifName);
  if (opts.podNs !== undefined) await cleanPodTable(opts.podNs, opts.ifName);

  const host = await link.find(hostNs, hostVethName(opts.containerId));
  if (host === undefined) return;
  if (!ownsHostVeth(host, opts.containerId)) {
    // A stale DEL (the runtime re-created the sandbox): the pair with this name is the new sandbox's.
    opts.log('host veth belongs to another container: left alone', { link: host.name, alias: host.alias });
    return;
  }
  if (ips.length > 0) {
    for (const p of ips) {
      await ignoreNotFound(route.del(hostNs, { dst: hostCidr(p), family: familyOf(p), oif: host.index }));
      await ignoreNotFound(neigh.del(hostNs, { index: host.index, ip: p }));
    }
    // Other chained interfaces of the pod still route through this pair: keep it.
    const others = [
      ...(await route.list(hostNs, { family: 4, oif: host.index })),
      ...(await route.list(hostNs, { family: 6, oif: host.index })),
    ].filter((r) => r.dst.endsWith('/32') || r.dst.endsWith('/128'));
    if (others.length > 0) {
      opts.log('host veth kept for other interfaces', { link: host.name, routes: others.map((r) => r.dst) });
      return;
    }
  }
  await ignoreNotFound(link.del(hostNs, host.index));
  opts.log('deleted host veth', { link: host.name });
}

/**
 * GC: deletes host veths of this network whose container is not among the
 * valid attachments. Keeps going on errors and returns them.
 */
export async function gcVeth(netName: string, valid: { containerID: string }[]): Promise<string[]> {
  const hostNs = hostNetns();
  const keep = new Set(valid.map((a) => a.containerID));
  const errors: string[] = [];
  for (const l of await link.list(hostNs)) {
    const cid = containerOfAlias(l.alias, netName);
    if (cid === undefined || keep.has(cid)) continue;
    try {
      await ignoreNotFound(link.del(hostNs, l.index));
    } catch (e) {
      errors.push(`${l.name}: ${e instanceof Error ? e.message : String(e)}`);
    }
  }
  return errors;
}
