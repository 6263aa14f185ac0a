/**
 * Route migration for a pod's secondary interfaces: the interface's routes
 * move from the main table to its own table, and `from <its IPs>` rules send
 * traffic sourced from those IPs there. Replies leave through the interface
 * they belong to while main keeps the first interface's default route.
 */
import { route, rule, type Netns, type UndoStack } from '@cnikit/netlib';
import { hostCidr } from './pod-ips';

/**
 * Table of an interface, 100+N-1 for the trailing number N of its name:
 * net1 -> 100, net2 -> 101; eth0 (and a name without a number) -> 99, so a
 * first interface that migrates (migrate_route 1) never shares net1's table.
 */
export function tableForInterface(ifName: string): number {
  const m = /(\d+)$/.exec(ifName);
  const n = m ? Number(m[1]) : 0;
  return 100 + n - 1;
}

/** Priority of the `from <ip>` rules of a table: the table number, so each interface's rules are told apart. */
export function rulePriorityForTable(table: number): number {
  return table;
}

function isLinkLocalRoute(dst: string): boolean {
  return dst.toLowerCase().startsWith('fe80:');
}

/**
 * Moves every main-table route of `ifIndex` (IPv6 link-local excepted: NDP needs it) to `table`
 * and adds `from <ip> lookup table` for each of `ips`. Each change is pushed on `undo`.
 */
export async function migrateRoutes(ns: Netns, ifIndex: number, ips: string[], table: number, undo: UndoStack): Promise<void> {
  for (const family of [4, 6] as const) {
    for (const r of await route.list(ns, { family, oif: ifIndex })) {
      if (isLinkLocalRoute(r.dst)) continue;
      const moved = { ...r, table };
      await route.replace(ns, moved);
      undo.push(`remove migrated route ${r.dst} table ${table}`, () => route.del(ns, moved));
      await route.del(ns, r);
      undo.push(`restore route ${r.dst}`, () => route.replace(ns, r));
    }
  }
  const priority = rulePriorityForTable(table);
  for (const ipAddr of ips) {
    const r = { family: ipAddr.includes(':') ? (6 as const) : (4 as const), src: hostCidr(ipAddr), table, priority };
    await rule.add(ns, r);
    undo.push(`remove rule from ${ipAddr} table ${table}`, () => rule.del(ns, r));
  }
}
