/**
 * Source NAT in the router pod: every packet leaving through the uplink that is not the pod's
 * own traffic is masqueraded to the pod's address. Two backends, as Coil offers:
 * - iptables: `iptables -t nat -A POSTROUTING ! -s <pod ip>/32 -o eth0 -j MASQUERADE` (ip6tables /128);
 * - nftables: one table of our own, `inet coil-egress`, replaced atomically when it differs.
 * The commands run through netlib's execInNetns (node:child_process; execa stays off product
 * paths for its load cost). Both converge and change nothing when the rules are in place.
 */
import { execInNetns, ip as ipmath, type Netns } from '@cnikit/netlib';
import { createHash } from 'node:crypto';

export type NatBackend = 'iptables' | 'nftables';
export const NAT_BACKENDS: readonly NatBackend[] = ['iptables', 'nftables'];
export const NFT_TABLE = 'coil-egress';

export interface SnatConfig {
  uplink: string;
  podIPv4?: string;
  podIPv6?: string;
}

export class SnatError extends Error {}

/** The iptables arguments of the MASQUERADE rule, `op` being -A, -C or -D. */
export function iptablesArgs(op: '-A' | '-C' | '-D', podIP: string, family: 4 | 6, uplink: string): string[] {
  return ['-w', '5', '-t', 'nat', op, 'POSTROUTING', '!', '-s', `${podIP}/${family === 4 ? 32 : 128}`, '-o', uplink, '-j', 'MASQUERADE'];
}

/** Canonical addresses: nft prints them so, and the installed rules are compared as text. */
const familiesOf = (c: SnatConfig): Array<{ family: 4 | 6; ip: string }> => [
  ...(c.podIPv4 ? [{ family: 4 as const, ip: ipmath.canonicalIp(c.podIPv4) }] : []),
  ...(c.podIPv6 ? [{ family: 6 as const, ip: ipmath.canonicalIp(c.podIPv6) }] : []),
];

/** The nftables rules, one per family, as `nft list` prints them back. */
export function nftRules(c: SnatConfig): string[] {
  return familiesOf(c).map(
    ({ family, ip }) => `oifname ${JSON.stringify(c.uplink)} ${family === 4 ? 'ip' : 'ip6'} saddr != ${ip} masquerade`,
  );
}

/** The nftables table's body (without the comment that records its digest). */
export function nftTableBody(c: SnatConfig): string {
  return [
    '  chain postrouting {',
    '    type nat hook postrouting priority srcnat; policy accept;',
    ...nftRules(c).map((r) => `    ${r}`),
    '  }',
  ].join('\n');
}

/** Digest of the wanted content, stored as the table's comment: equal digest = nothing to do. */
export const nftDigest = (c: SnatConfig): string =>
  `coil-egress ${createHash('sha256').update(nftTableBody(c)).digest('hex').slice(0, 16)}`;

/**
 * One nft transaction: declare (so the delete cannot fail), delete, and define the table again.
 * The kernel applies it all or nothing, so no packet sees the table half built.
 */
export function nftScript(c: SnatConfig): string {
  return [
    `table inet ${NFT_TABLE}`,
    `delete table inet ${NFT_TABLE}`,
    `table inet ${NFT_TABLE} {`,
    `  comment ${JSON.stringify(nftDigest(c))}`,
    nftTableBody(c),
    '}',
    '',
  ].join('\n');
}

async function run(
  ns: Netns,
  cmd: string,
  args: string[],
  input?: string,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const r = await execInNetns(ns, cmd, args, { ...(input !== undefined ? { input } : {}), timeoutMs: 30_000 });
  return { code: r.code, stdout: r.stdout.toString(), stderr: r.stderr.toString() };
}

/** Installs the SNAT rules for `backend`; returns true when something changed. */
export async function ensureSnat(ns: Netns, backend: NatBackend, c: SnatConfig): Promise<boolean> {
  if (backend === 'nftables') {
    const cur = await readNftTable(ns);
    // The digest says the table is ours and current; the rules are compared too, so that a
    // rule deleted or added by hand is repaired on the next pass.
    if (cur && cur.comment === nftDigest(c) && sameSet(cur.rules, nftRules(c))) return false;
    const r = await run(ns, 'nft', ['-f', '-'], nftScript(c));
    if (r.code !== 0) throw new SnatError(`nft: install table inet ${NFT_TABLE}: exit ${r.code}: ${r.stderr.trim()}`);
    return true;
  }
  let changed = false;
  for (const { family, ip } of familiesOf(c)) {
    const cmd = family === 4 ? 'iptables' : 'ip6tables';
    const check = await run(ns, cmd, iptablesArgs('-C', ip, family, c.uplink));
    if (check.code === 0) continue;
    const add = await run(ns, cmd, iptablesArgs('-A', ip, family, c.uplink));
    if (add.code !== 0) throw new SnatError(`${cmd}: add MASQUERADE for ! -s ${ip}: exit ${add.code}: ${add.stderr.trim()}`);
    changed = true;
  }
  return changed;
}

/** Removes what ensureSnat installed for `backend` (absent is fine). */
export async function removeSnat(ns: Netns, backend: NatBackend, c: SnatConfig): Promise<void> {
  if (backend === 'nftables') {
    if (!(await readNftTable(ns))) return;
    const r = await run(ns, 'nft', ['delete', 'table', 'inet', NFT_TABLE]);
    if (r.code !== 0) throw new SnatError(`nft: delete table inet ${NFT_TABLE}: exit ${r.code}: ${r.stderr.trim()}`);
    return;
  }
  for (const { family, ip } of familiesOf(c)) {
    const cmd = family === 4 ? 'iptables' : 'ip6tables';
    // -D removes one copy per call: loop in case the rule was added twice by hand.
    for (let i = 0; i < 16; i++) if ((await run(ns, cmd, iptablesArgs('-D', ip, family, c.uplink))).code !== 0) break;
  }
}

const sameSet = (a: string[], b: string[]): boolean => a.length === b.length && [...a].sort().join('\n') === [...b].sort().join('\n');

/** The table's comment and its masquerade rules, or undefined when it does not exist. */
export async function readNftTable(ns: Netns): Promise<{ comment?: string; rules: string[] } | undefined> {
  // Text, not -j: nft 1.0.6's JSON leaves the table comment out.
  const r = await run(ns, 'nft', ['list', 'table', 'inet', NFT_TABLE]);
  if (r.code !== 0) return undefined;
  return parseNftTable(r.stdout);
}

/** Parses `nft list table` output (exported for tests). */
export function parseNftTable(text: string): { comment?: string; rules: string[] } {
  const comment = /^\s*comment "((?:[^"\\]|\\.)*)"/m.exec(text)?.[1];
  const rules = text
    .split('\n')
    .map((l) => l.trim().replace(/\s+#\s*handle \d+$/, ''))
    .filter((l) => /\bmasquerade\b/.test(l));
  return { ...(comment !== undefined ? { comment } : {}), rules };
}
