/**
 * Policy routing rules, IPv4 and IPv6 (RTM_{NEW,DEL,GET}RULE).
 */
import { attr, parseAttrs, readStr, readU32, str, u32 } from '../nl/attrs';
import { afOf, familyOfAf, formatPrefix, parsePrefix, type Family } from '../nl/inet';
import { dump, NLM_F, request } from '../nl/request';
import { RTM } from '../nl/rtm';
import type { Netns } from '../netns/handle';

export interface Rule {
  family: Family;
  /** Preference: lower runs first. The kernel picks one when absent on add. */
  priority?: number;
  /** Source prefix (CIDR). */
  src?: string;
  /** Destination prefix (CIDR). */
  dst?: string;
  table: number;
  fwmark?: number;
  fwmask?: number;
  /** Input interface name. */
  iif?: string;
  /** Output interface name. */
  oif?: string;
  /** FR_ACT_*: 1 to table (default), 2 goto, 3 nop, 6 blackhole, 7 unreachable, 8 prohibit. */
  action?: number;
}

/** What rule.del matches: any fields of a Rule; those left out match anything. */
export type RuleMatch = Partial<Rule>;

export const FR_ACT = { TO_TBL: 1, GOTO: 2, NOP: 3, BLACKHOLE: 6, UNREACHABLE: 7, PROHIBIT: 8 } as const;

const FRA_DST = 1;
const FRA_SRC = 2;
const FRA_IIFNAME = 3;
const FRA_PRIORITY = 6;
const FRA_FWMARK = 10;
const FRA_TABLE = 15;
const FRA_FWMASK = 16;
const FRA_OIFNAME = 17;
const RT_TABLE_UNSPEC = 0;

/** struct fib_rule_hdr { u8 family, dst_len, src_len, tos, table, res1, res2, action; u32 flags; } */
function fibRuleHdr(af: number, dstLen: number, srcLen: number, table: number, action: number): Buffer {
  return Buffer.from([af, dstLen, srcLen, 0, table, 0, 0, action, 0, 0, 0, 0]);
}

function parseRule(data: Buffer): Rule | undefined {
  const family = familyOfAf(data[0]!);
  if (!family) return undefined;
  const a = parseAttrs(data, 12);
  const r: Rule = {
    family,
    priority: a.has(FRA_PRIORITY) ? readU32(a.get(FRA_PRIORITY)!) : 0, // the kernel omits a zero preference
    table: a.has(FRA_TABLE) ? readU32(a.get(FRA_TABLE)!) : data[4]!,
    action: data[7]!,
  };
  const src = a.get(FRA_SRC);
  if (src) r.src = formatPrefix(src, data[2]!);
  const dst = a.get(FRA_DST);
  if (dst) r.dst = formatPrefix(dst, data[1]!);
  const mark = a.get(FRA_FWMARK);
  if (mark) r.fwmark = readU32(mark);
  const mask = a.get(FRA_FWMASK);
  if (mask) r.fwmask = readU32(mask);
  const iif = a.get(FRA_IIFNAME);
  if (iif) r.iif = readStr(iif);
  const oif = a.get(FRA_OIFNAME);
  if (oif) r.oif = readStr(oif);
  return r;
}

function describe(r: RuleMatch): string {
  const parts: string[] = [];
  if (r.priority !== undefined) parts.push(`pref ${r.priority}`);
  parts.push(`from ${r.src ?? 'all'}`);
  if (r.dst) parts.push(`to ${r.dst}`);
  if (r.fwmark !== undefined) parts.push(`fwmark 0x${r.fwmark.toString(16)}${r.fwmask !== undefined ? `/0x${r.fwmask.toString(16)}` : ''}`);
  if (r.iif) parts.push(`iif ${r.iif}`);
  if (r.oif) parts.push(`oif ${r.oif}`);
  if (r.table !== undefined) parts.push(`table ${r.table}`);
  if (r.family === 6) parts.unshift('-6');
  return parts.join(' ');
}

function encode(r: RuleMatch, forDelete: boolean): Buffer {
  const src = r.src ? parsePrefix(r.src) : undefined;
  const dst = r.dst ? parsePrefix(r.dst) : undefined;
  const family = r.family ?? src?.family ?? dst?.family ?? 4;
  for (const p of [src, dst]) if (p && p.family !== family) throw new TypeError(`rule ${describe(r)}: address family does not match`);
  const table = r.table;
  const action = r.action ?? (forDelete ? 0 : FR_ACT.TO_TBL);
  const head = fibRuleHdr(
    afOf(family),
    dst?.prefixLen ?? 0,
    src?.prefixLen ?? 0,
    table !== undefined && table < 256 ? table : RT_TABLE_UNSPEC,
    action,
  );
  const attrs: Buffer[] = [];
  if (table !== undefined) attrs.push(attr(FRA_TABLE, u32(table)));
  if (r.priority !== undefined) attrs.push(attr(FRA_PRIORITY, u32(r.priority)));
  if (src) attrs.push(attr(FRA_SRC, src.bytes));
  if (dst) attrs.push(attr(FRA_DST, dst.bytes));
  if (r.fwmark !== undefined) attrs.push(attr(FRA_FWMARK, u32(r.fwmark)));
  if (r.fwmask !== undefined) attrs.push(attr(FRA_FWMASK, u32(r.fwmask)));
  if (r.iif) attrs.push(attr(FRA_IIFNAME, str(r.iif)));
  if (r.oif) attrs.push(attr(FRA_OIFNAME, str(r.oif)));
  return Buffer.concat([head, ...attrs]);
}

/** Rules of one family, or of both when `family` is omitted. */
export async function list(ns: Netns, family?: Family): Promise<Rule[]> {
  const af = family ? afOf(family) : 0;
  const replies = await dump(ns, RTM.GETRULE, fibRuleHdr(af, 0, 0, 0, 0), { op: 'list rules', object: family ? `ipv${family}` : 'all' });
  const out: Rule[] = [];
  for (const reply of replies) {
    if (reply.type !== RTM.NEWRULE) continue;
    const r = parseRule(reply.data); // an unspecified-family dump also returns multicast routing rules: skipped
    if (r && (!family || r.family === family)) out.push(r);
  }
  return out;
}

/** Adds a rule; EEXIST when an identical one exists. */
export async function add(ns: Netns, r: Rule): Promise<void> {
  await request(ns, RTM.NEWRULE, NLM_F.CREATE | NLM_F.EXCL, encode(r, false), { op: 'add rule', object: describe(r) });
}

/** Deletes the first rule matching every field given; ENOENT when none does. */
export async function del(ns: Netns, r: RuleMatch): Promise<void> {
  await request(ns, RTM.DELRULE, 0, encode(r, true), { op: 'del rule', object: describe(r) });
}
