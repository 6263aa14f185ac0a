/**
 * veth CHECK: verifies every object ADD created and reports all that are
 * missing or wrong in one error (details list them), so an operator sees the
 * whole damage at once. Objects added by later plugins are tolerated.
 */
import { CniError, hostNetns, ip, link, neigh, route, rule, type Netns } from '@cnikit/netlib';
import { familyOf, hijackSubnets, hostCidr, requirePodIPs, rulePriorityForTable } from '@cnikit/meta';
import type { VethConfig } from './config';
import { hostVethAlias, hostVethName, POD_VETH } from './names';
import { MAIN_TABLE, planTables } from './setup';

/** Code of a failed CHECK: plugin-specific range. */
export const CODE_CHECK_FAILED = 102;

export async function checkVeth(cfg: VethConfig, containerId: string, ifName: string, podNs: Netns): Promise<void> {
  const hostNs = hostNetns();
  const problems: string[] = [];
  const podIPs = requirePodIPs(cfg.prevResult!, ifName);
  const chained = await link.find(podNs, ifName);
  if (chained === undefined) problems.push(`interface ${ifName} missing in the pod`);
  const pod = await link.find(podNs, POD_VETH);
  const hostName = hostVethName(containerId);
  const host = await link.find(hostNs, hostName);
  if (pod === undefined) problems.push(`${POD_VETH} missing in the pod`);
  else if (!pod.up) problems.push(`${POD_VETH} is down`);
  if (host === undefined) problems.push(`host veth ${hostName} missing`);
  else {
    if (!host.up) problems.push(`host veth ${hostName} is down`);
    if (host.alias !== hostVethAlias(cfg.netName, containerId))
      problems.push(`host veth ${hostName} has alias ${JSON.stringify(host.alias)}`);
  }
  if (pod === undefined || host === undefined) throw new CniError(CODE_CHECK_FAILED, 'veth check failed', problems.join('; '));

  const hostNeigh = await neigh.list(hostNs, { index: host.index });
  for (const p of podIPs) {
    const n = hostNeigh.find((x) => x.ip === p);
    if (n === undefined || n.mac !== pod.mac || n.state !== neigh.NUD.PERMANENT) problems.push(`host neighbour ${p} -> ${pod.mac} missing`);
  }
  const hostRoutes = [
    ...(await route.list(hostNs, { family: 4, oif: host.index })),
    ...(await route.list(hostNs, { family: 6, oif: host.index })),
  ];
  for (const p of podIPs) {
    if (!hostRoutes.some((r) => r.dst === hostCidr(p))) problems.push(`host route ${hostCidr(p)} dev ${host.name} missing`);
  }

  // The host IPs ADD pinned are read back from the pod's permanent neighbours on veth0
  // (re-discovering them would not do: the host's route to the pod now goes through the pair).
  const podNeigh = await neigh.list(podNs, { index: pod.index });
  const pinned = podNeigh.filter((n) => n.state === neigh.NUD.PERMANENT && n.mac === host.mac).map((n) => n.ip);
  for (const family of new Set(podIPs.map(familyOf))) {
    if (!pinned.some((h) => familyOf(h) === family)) problems.push(`no IPv${family} host neighbour -> ${host.mac} on ${POD_VETH}`);
  }
  // Whether ADD saw this interface first (it created the pair and routed through main) is read
  // back from the kernel: main routes through veth0 whose source is one of this interface's IPs.
  const main = [...(await route.list(podNs, { family: 4 })), ...(await route.list(podNs, { family: 6 }))];
  const first = main.some((r) => r.oif === pod.index && r.src !== undefined && podIPs.includes(r.src));
  const plan = planTables(cfg, ifName, first);
  for (const table of plan.tables) {
    const have =
      table === MAIN_TABLE
        ? main
        : [...(await route.list(podNs, { family: 4, table })), ...(await route.list(podNs, { family: 6, table }))];
    const viaVeth = have.filter((r) => r.oif === pod.index);
    for (const h of pinned.filter((x) => !x.toLowerCase().startsWith('fe80:'))) {
      if (!viaVeth.some((r) => r.dst === hostCidr(h))) problems.push(`pod route ${hostCidr(h)} dev ${POD_VETH} table ${table} missing`);
    }
    for (const subnet of hijackSubnets(cfg)) {
      if (!podIPs.some((p) => familyOf(p) === ip.familyOf(subnet))) continue;
      const r = viaVeth.find((x) => x.dst === subnet);
      if (r === undefined || r.gw === undefined || !pinned.includes(r.gw))
        problems.push(`pod route ${subnet} via a host IP dev ${POD_VETH} table ${table} missing`);
    }
  }
  if (plan.migrateTo !== undefined) {
    for (const p of podIPs) {
      const rules = await rule.list(podNs, familyOf(p));
      const ok = rules.some(
        (r) => r.table === plan.migrateTo && r.src === hostCidr(p) && r.priority === rulePriorityForTable(plan.migrateTo!),
      );
      if (!ok) problems.push(`pod rule from ${p} lookup ${plan.migrateTo} missing`);
    }
  }
  if (problems.length > 0) throw new CniError(CODE_CHECK_FAILED, 'veth check failed', problems.join('; '));
}
