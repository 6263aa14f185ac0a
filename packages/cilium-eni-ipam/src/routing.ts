/**
 * Routing for an ENI IP in the host netns (Cilium's ENI datapath): egress from the pod IP goes out through
 * its ENI's own table (default via the subnet's router on the ENI link), ingress to it through main.
 *   ip rule add from <ip>/32 lookup <offset+n> pref 111;  ip rule add to <ip>/32 lookup main pref 20
 *   ip route replace <subnet> dev <eni> scope link table <offset+n>;  ip route replace default via <gw> dev <eni> table <offset+n>
 */
import { TransientError, isExistsError, isNotFoundError, link, route, rule, type Netns } from '@cnikit/netlib';
import type { EniInfo } from './pool';

export interface RoutingOptions {
  tableOffset: number;
  rulePriority: number;
  ingressPriority: number;
}

export function tableFor(eni: EniInfo, o: RoutingOptions): number {
  return o.tableOffset + eni.number;
}

export async function setupEniRouting(host: Netns, podIp: string, eni: EniInfo, o: RoutingOptions): Promise<void> {
  const table = tableFor(eni, o);
  const dev = (await link.list(host)).find((l) => l.mac.toLowerCase() === eni.mac.toLowerCase());
  if (!dev) throw new TransientError(`routing: ENI ${eni.id} (${eni.mac}) is not on this host yet`);
  if (!dev.up) await link.setUp(host, dev.index);
  await route.replace(host, { dst: eni.subnetCidr, oif: dev.index, table, scope: route.RT_SCOPE.LINK });
  await route.replace(host, { dst: 'default', gw: eni.gateway, oif: dev.index, table });
  for (const r of [
    { family: 4 as const, priority: o.rulePriority, src: `${podIp}/32`, table },
    { family: 4 as const, priority: o.ingressPriority, dst: `${podIp}/32`, table: route.RT_TABLE.MAIN },
  ]) {
    try {
      await rule.add(host, r);
    } catch (e) {
      if (!isExistsError(e)) throw e;
    }
  }
}

/** Removes the pod IP's rules (idempotent). The ENI's table stays: other pods share it. */
export async function teardownEniRouting(host: Netns, podIp: string, o: RoutingOptions): Promise<void> {
  for (const r of [
    { family: 4 as const, priority: o.rulePriority, src: `${podIp}/32` },
    { family: 4 as const, priority: o.ingressPriority, dst: `${podIp}/32` },
  ]) {
    try {
      await rule.del(host, r);
    } catch (e) {
      if (!isNotFoundError(e)) throw e;
    }
  }
}

/**
 * CHECK: the pod IP's rules (from <ip>/32 -> ENI table at rulePriority, to <ip>/32 -> main) and the ENI table's
 * routes (subnet on-link and default via the gateway, both on the ENI link found by MAC) exist. Throws a
 * message naming what is missing.
 */
export async function checkEniRouting(host: Netns, podIp: string, eni: EniInfo, o: RoutingOptions): Promise<void> {
  const table = tableFor(eni, o);
  const missing: string[] = [];
  const rules = await rule.list(host, 4);
  const host32 = (p: string | undefined): string | undefined => p?.replace(/\/32$/, '');
  if (!rules.some((r) => r.priority === o.rulePriority && host32(r.src) === podIp && !r.dst && r.table === table))
    missing.push(`rule from ${podIp} lookup ${table} pref ${o.rulePriority}`);
  if (!rules.some((r) => r.priority === o.ingressPriority && host32(r.dst) === podIp && !r.src && r.table === route.RT_TABLE.MAIN))
    missing.push(`rule to ${podIp} lookup main pref ${o.ingressPriority}`);
  const dev = (await link.list(host)).find((l) => l.mac.toLowerCase() === eni.mac.toLowerCase());
  if (!dev) missing.push(`ENI ${eni.id} link (${eni.mac})`);
  else {
    const routes = await route.list(host, { table, family: 4 });
    if (eni.subnetCidr && !routes.some((r) => r.dst === eni.subnetCidr && r.oif === dev.index))
      missing.push(`route ${eni.subnetCidr} dev ${dev.name} table ${table}`);
    if (!routes.some((r) => (r.dst === 'default' || r.dst === '0.0.0.0/0') && r.gw === eni.gateway && r.oif === dev.index))
      missing.push(`route default via ${eni.gateway} dev ${dev.name} table ${table}`);
  }
  if (missing.length) throw new Error(`missing ${missing.join('; ')}`);
}
