/**
 * What a namespace holds, as sorted lines that read like `ip` output, for leak checks:
 * take a snapshot before ADD, another after DEL, and expect `diffSnapshots` to be empty.
 *
 * Volatile state is left out: link counters and operstate, neighbour entries learnt from traffic
 * (only PERMANENT/NOARP entries are kept, plus any entry for the `ips` you name), IPv6 link-local
 * addresses (they come and go with their links, which are compared).
 */
import { run } from './exec';
import { Netns } from './netns';

export interface NetSnapshot {
  links: string[];
  addrs: string[];
  routes: string[];
  rules: string[];
  neigh: string[];
  nft: string[];
}

interface IpLink {
  ifname: string;
  link_type?: string;
  master?: string;
  address?: string;
  linkinfo?: { info_kind?: string };
  ifalias?: string;
}
interface IpAddr {
  ifname: string;
  addr_info: { family: string; local: string; prefixlen: number; scope: string }[];
}
interface IpRoute {
  type?: string;
  dst: string;
  gateway?: string;
  dev?: string;
  protocol?: string;
  scope?: string;
  metric?: number;
  table?: string;
  prefsrc?: string;
  flags?: string[];
}
interface IpRule {
  priority: number;
  src?: string;
  srclen?: number;
  dst?: string;
  dstlen?: number;
  table?: string;
  iif?: string;
  oif?: string;
  fwmark?: string;
}
interface IpNeigh {
  dst: string;
  dev: string;
  lladdr?: string;
  state?: string[];
}

const opt = (k: string, v: unknown): string => (v === undefined || v === '' ? '' : ` ${k} ${String(v)}`);

export async function links(ns: Netns): Promise<string[]> {
  const l = await ns.ipJson<IpLink>('-d', 'link', 'show');
  return l
    .map((x) => `${x.ifname}${opt('kind', x.linkinfo?.info_kind ?? x.link_type)}${opt('master', x.master)}${opt('alias', x.ifalias)}`)
    .sort();
}

async function addrs(ns: Netns): Promise<string[]> {
  const a = await ns.ipJson<IpAddr>('addr', 'show');
  return a
    .flatMap((x) =>
      x.addr_info.filter((i) => !(i.family === 'inet6' && i.scope === 'link')).map((i) => `${x.ifname} ${i.local}/${i.prefixlen}`),
    )
    .sort();
}

async function routes(ns: Netns): Promise<string[]> {
  const out: string[] = [];
  for (const fam of ['-4', '-6']) {
    const r = await ns.ipJson<IpRoute>(fam, 'route', 'show', 'table', 'all');
    for (const x of r) {
      if (x.dst.startsWith('fe80::') || x.dst.startsWith('ff00::') || x.type === 'multicast') continue; // link-local, per link
      out.push(
        `${x.type && x.type !== 'unicast' ? `${x.type} ` : ''}${x.dst}${opt('via', x.gateway)}${opt('dev', x.dev)}` +
          `${opt('table', x.table ?? 'main')}${opt('proto', x.protocol)}${opt('scope', x.scope)}${opt('src', x.prefsrc)}${opt('metric', x.metric)}` +
          `${x.flags?.includes('onlink') ? ' onlink' : ''}`,
      );
    }
  }
  return out.sort();
}

export async function rules(ns: Netns): Promise<string[]> {
  const out: string[] = [];
  for (const fam of ['-4', '-6']) {
    const r = await ns.ipJson<IpRule>(fam, 'rule', 'show');
    for (const x of r) {
      out.push(
        `${fam} ${x.priority}: from ${x.src ?? 'all'}${x.srclen !== undefined ? `/${x.srclen}` : ''}` +
          `${x.dst ? ` to ${x.dst}${x.dstlen !== undefined ? `/${x.dstlen}` : ''}` : ''}${opt('iif', x.iif)}${opt('oif', x.oif)}${opt('fwmark', x.fwmark)} lookup ${x.table ?? '?'}`,
      );
    }
  }
  return out.sort();
}

export async function neighbours(ns: Netns, ips: readonly string[] = []): Promise<string[]> {
  const n = await ns.ipJson<IpNeigh>('neigh', 'show');
  return n
    .filter((x) => ips.includes(x.dst) || (x.state ?? []).some((s) => s === 'PERMANENT' || s === 'NOARP'))
    .map((x) => `${x.dst} dev ${x.dev}${opt('lladdr', x.lladdr)} ${(x.state ?? []).join(',')}`)
    .sort();
}

async function nftRuleset(ns: Netns): Promise<string[]> {
  const r = await ns.exec(['nft', 'list', 'ruleset']);
  if (r.code !== 0) return [`(nft failed: ${r.stderr.trim()})`];
  return r.stdout
    .split('\n')
    .map((l) => l.trim())
    .filter(Boolean);
}

/** Everything in `ns` that a CNI attachment may create. `ips`: include neighbour entries for these in any state. */
export async function snapshot(ns: Netns, ips: readonly string[] = []): Promise<NetSnapshot> {
  return {
    links: await links(ns),
    addrs: await addrs(ns),
    routes: await routes(ns),
    rules: await rules(ns),
    neigh: await neighbours(ns, ips),
    nft: await nftRuleset(ns),
  };
}

/** Lines added (`+ ...`) and removed (`- ...`) between two snapshots, prefixed by their section. */
export function diffSnapshots(before: NetSnapshot, after: NetSnapshot): string[] {
  const out: string[] = [];
  for (const key of Object.keys(before) as (keyof NetSnapshot)[]) {
    const b = new Set(before[key]);
    const a = new Set(after[key]);
    for (const l of after[key]) if (!b.has(l)) out.push(`${key}: + ${l}`);
    for (const l of before[key]) if (!a.has(l)) out.push(`${key}: - ${l}`);
  }
  return out;
}

/** Human-readable dump of a namespace (addresses, routes of all tables, rules, neighbours) for logs and the demo. */
export async function describeNs(ns: Netns): Promise<string> {
  const parts: string[] = [];
  for (const [title, argv] of [
    ['addresses', ['-br', 'addr']],
    ['routes (all tables)', ['route', 'show', 'table', 'all']],
    ['IPv6 routes (all tables)', ['-6', 'route', 'show', 'table', 'all']],
    ['rules', ['rule']],
    ['neighbours', ['neigh']],
  ] as const) {
    const r = await run(['ip', '-n', ns.name, ...argv]);
    const body = r.stdout
      .split('\n')
      .filter((l) => l && !/^(local |multicast |broadcast |fe80::|ff00::|anycast )/.test(l.trim()))
      .join('\n');
    parts.push(`## ${ns.name}: ${title}\n${body}`);
  }
  return parts.join('\n');
}

/** Packet counters of a link (from `ip -s`), to show which interface carried traffic. */
export async function linkCounters(ns: Netns, ifname: string): Promise<{ rxPackets: number; txPackets: number }> {
  const [l] = await ns.ipJson<{ stats64?: { rx: { packets: number }; tx: { packets: number } } }>('-s', 'link', 'show', 'dev', ifname);
  if (!l?.stats64) throw new Error(`no counters for ${ifname} in ${ns.name}`);
  return { rxPackets: l.stats64.rx.packets, txPackets: l.stats64.tx.packets };
}

/** The route the kernel picks for `dst` (optionally from `src`): `{dev, gateway, prefsrc}`. */
export async function routeGet(
  ns: Netns,
  dst: string,
  from?: string,
): Promise<{ dev?: string; gateway?: string; prefsrc?: string; table?: string }> {
  const [r] = await ns.ipJson<{ dev?: string; gateway?: string; prefsrc?: string; table?: string }>(
    'route',
    'get',
    dst,
    ...(from ? ['from', from] : []),
  );
  if (!r) throw new Error(`ip route get ${dst} returned nothing in ${ns.name}`);
  return r;
}
