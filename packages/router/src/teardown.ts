/**
 * router DEL and GC. DEL removes everything ADD created for the attachment:
 * in the pod (if its netns still exists) the NIC's own table and rules, and,
 * with the pod's last router NIC, the shared overlay table, its rules and
 * neighbours, eth0's routes going back to main; on the host the attachment's
 * routes (found by their protocol and attachment key, so neither prevResult
 * nor the netns is needed), the neighbour entries they implied, and the host
 * rule once host_rule_table is empty. Absent objects are fine: DEL repeats.
 */
import { addr, CniCode, CniError, link, type Netns, type Result, type route } from '@cnikit/netlib';
import { attachmentIPs, type LogFn } from '@cnikit/meta';
import { MAIN_TABLE, ownedHostRoutes, releaseHostRules, removeHostRoutes } from './host';
import { attachmentKey, fromPriority, HIJACK_PRIORITY, networkTag, networkTagOfKey, overlayTable, ownTable } from './marks';
import { dropNeighbours, dropOwnRoutes, emptyTable } from './pod';

export interface DelRequest {
  netName: string;
  overlayInterface: string;
  containerId: string;
  ifName: string;
  hostNs: Netns;
  podNs: Netns | undefined;
  prev: Result | undefined;
  log: LogFn;
}

/** Names of the pod's other links whose addresses still have router host routes (`owned`): other router NICs. */
async function otherRouterNics(owned: route.Route[], podNs: Netns, skip: string[]): Promise<string[]> {
  const ownedIPs = new Set(owned.map((r) => r.dst.split('/')[0]!));
  const names = new Map((await link.list(podNs)).map((l) => [l.index, l.name]));
  const out = new Set<string>();
  for (const a of await addr.list(podNs)) {
    const name = names.get(a.index);
    if (name === undefined || name === 'lo' || skip.includes(name) || a.scope !== 0) continue;
    if (ownedIPs.has(a.address.split('/')[0]!)) out.add(name);
  }
  return [...out];
}

async function delPodSide(req: DelRequest, owned: route.Route[]): Promise<void> {
  const podNs = req.podNs!;
  const tOverlay = overlayTable(req.overlayInterface);
  const tOwn = ownTable(req.ifName);
  if (tOwn !== tOverlay) await emptyTable(podNs, tOwn, [fromPriority(tOwn)], req.log);
  const chained = await link.find(podNs, req.ifName);
  if (chained !== undefined) await dropOwnRoutes(podNs, chained.index, MAIN_TABLE);

  const others = await otherRouterNics(owned, podNs, [req.ifName, req.overlayInterface]);
  if (others.length > 0) {
    req.log('shared pod state kept for other router NICs', { others });
    return;
  }
  const nextHops = await emptyTable(podNs, tOverlay, [HIJACK_PRIORITY, fromPriority(tOverlay)], req.log);
  const overlay = await link.find(podNs, req.overlayInterface);
  if (overlay !== undefined) await dropNeighbours(podNs, overlay.index, nextHops);
  req.log('shared pod state removed', { overlayTable: tOverlay, nextHops });
}

export async function delRouter(req: DelRequest): Promise<void> {
  const ips = await attachmentIPs(req.prev, req.podNs, req.ifName);
  // One dump of the host's router routes serves the pod side's question and the removal.
  const owned = await ownedHostRoutes(req.hostNs);
  if (req.podNs !== undefined) await delPodSide(req, owned);

  const key = attachmentKey(req.netName, req.containerId, req.ifName);
  const mine = owned.filter((r) => r.metric === key && (ips.length === 0 || ips.includes(r.dst.split('/')[0]!)));
  const { removed, errors } = await removeHostRoutes(req.hostNs, mine);
  req.log('host objects removed', { removed, ipsFrom: req.prev ? 'prevResult' : req.podNs ? 'pod' : 'key only' });
  if (errors.length > 0) throw new CniError(CniCode.Internal, 'router DEL could not remove every host object', errors.join('; '));
}

/**
 * GC: removes host routes (and their neighbours) of this network whose
 * attachment is not in `valid`, then the host rule when host_rule_table is
 * empty. Keeps going on errors and returns them.
 */
export async function gcRouter(
  hostNs: Netns,
  netName: string,
  hostRuleTable: number,
  valid: { containerID: string; ifname: string }[],
  log: LogFn,
): Promise<string[]> {
  const tag = networkTag(netName);
  const keep = new Set(valid.map((a) => attachmentKey(netName, a.containerID, a.ifname)));
  const stale = (await ownedHostRoutes(hostNs)).filter(
    (r) => r.metric !== undefined && networkTagOfKey(r.metric) === tag && !keep.has(r.metric),
  );
  const { removed, errors } = await removeHostRoutes(hostNs, stale);
  try {
    removed.push(
      ...(await releaseHostRules(hostNs, [
        { family: 4, table: hostRuleTable },
        { family: 6, table: hostRuleTable },
      ])),
    );
  } catch (e) {
    errors.push(`host rule: ${e instanceof Error ? e.message : String(e)}`);
  }
  log('GC', { removed, errors, kept: keep.size });
  return errors;
}
