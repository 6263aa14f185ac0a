/**
 * Traffic control: tbf / htb / ingress qdiscs and the u32 + mirred redirect filter
 * used to shape a container's ingress through an ifb device.
 *
 * The `netlink` package leaves TCA_OPTIONS as raw bytes, so the qdisc and filter
 * option structures (tc_tbf_qopt, tc_htb_glob, tc_u32_sel, tc_mirred) are encoded here.
 */
import { attr, nest, parseAttrs, readS32, readStr, readU16, readU32, s32, str, u32, u64, writeS16, writeS32, writeU32 } from '../nl/attrs';
import { dump, NLM_F, request } from '../nl/request';
import { RTM } from '../nl/rtm';
import type { Netns } from '../netns/handle';
import { xmitTicks } from './psched';

/** Special parents (linux/pkt_sched.h). */
export const TC_H = { ROOT: 0xffffffff, INGRESS: 0xfffffff1, UNSPEC: 0 } as const;
/** The ingress qdisc's handle, "ffff:". */
export const INGRESS_HANDLE = 0xffff0000;

/** Builds a tc handle from major and minor numbers: handle(1, 0) is "1:", handle(0xffff, 0) is "ffff:". */
export const handle = (major: number, minor = 0): number => (((major & 0xffff) << 16) | (minor & 0xffff)) >>> 0;

const TCA_KIND = 1;
const TCA_OPTIONS = 2;

/** struct tcmsg { u8 family; u8 pad1; u16 pad2; s32 ifindex; u32 handle; u32 parent; u32 info; } */
function tcmsg(ifindex: number, handleId: number, parent: number, info = 0): Buffer {
  const b = Buffer.alloc(20);
  writeS32(b, ifindex, 4);
  writeU32(b, handleId, 8);
  writeU32(b, parent, 12);
  writeU32(b, info, 16);
  return b;
}

const fmtHandle = (h: number): string =>
  h === TC_H.ROOT ? 'root' : `${(h >>> 16).toString(16)}:${h & 0xffff ? (h & 0xffff).toString(16) : ''}`;

async function addQdisc(
  ns: Netns,
  index: number,
  head: Buffer,
  kind: string,
  options: Buffer[] | undefined,
  object: string,
): Promise<void> {
  const body = [head, attr(TCA_KIND, str(kind))];
  if (options) body.push(nest(TCA_OPTIONS, ...options));
  await request(ns, RTM.NEWQDISC, NLM_F.CREATE | NLM_F.EXCL, Buffer.concat(body), {
    op: 'add qdisc',
    object: `${kind} dev index ${index} ${object}`,
  });
}

// --- tbf ---------------------------------------------------------------------------

const TCA_TBF_PARMS = 1;
const TCA_TBF_RTAB = 2;
const TCA_TBF_RATE64 = 4;
const TCA_TBF_BURST = 6;
const TC_LINKLAYER_ETHERNET = 1;
/** Rate tables cover packet sizes up to this MTU in 256 cells (iproute2's default when no mtu is given). */
const RTAB_MTU = 2047;
const RTAB_CELLS = 256;
/** Default queueing latency bound when neither limitBytes nor latencyUs is given (what the CNI bandwidth plugin uses). */
const DEFAULT_LATENCY_US = 25_000;

export interface TbfOptions {
  /** Rate in bytes per second. */
  rateBps: number;
  /** Bucket size in bytes (at least the MTU, or full-size packets never pass). */
  burstBytes: number;
  /** Maximum time a packet may wait; converted to a queue limit. Default 25 ms. */
  latencyUs?: number;
  /** Queue limit in bytes; overrides latencyUs. */
  limitBytes?: number;
}

/** Converts bits per second (how people quote rates) to the bytes per second tc wants. */
export const bitsToBytes = (bitsPerSecond: number): number => Math.floor(bitsPerSecond / 8);

/**
 * struct tc_ratespec { u8 cell_log; u8 linklayer; u16 overhead; s16 cell_align; u16 mpu; u32 rate; }
 * Rates of 4 GiB/s and more do not fit: the field is saturated and TCA_TBF_RATE64 carries the value.
 */
function ratespec(rateBps: number, cellLog: number): Buffer {
  const b = Buffer.alloc(12);
  b[0] = cellLog;
  b[1] = TC_LINKLAYER_ETHERNET;
  writeS16(b, -1, 4); // cell_align
  writeU32(b, Math.min(rateBps, 0xffffffff), 8);
  return b;
}

/** The 256-entry rate table: ticks to send (i+1) << cell_log bytes, as tc_calc_rtable builds it. */
function rateTable(rateBps: number): { cellLog: number; table: Buffer } {
  let cellLog = 0;
  while (RTAB_MTU >> cellLog > 255) cellLog++;
  const table = Buffer.alloc(RTAB_CELLS * 4);
  for (let i = 0; i < RTAB_CELLS; i++) writeU32(table, xmitTicks(rateBps, (i + 1) << cellLog), i * 4);
  return { cellLog, table };
}

/** Adds a tbf root qdisc shaping link `index` to `rateBps` bytes/s. EEXIST when a root qdisc was already added. */
export async function addTbf(ns: Netns, index: number, o: TbfOptions): Promise<void> {
  if (!(o.rateBps > 0) || !(o.burstBytes > 0)) throw new RangeError('tbf: rateBps and burstBytes must be positive');
  const { cellLog, table } = rateTable(o.rateBps);
  const limit = o.limitBytes ?? Math.trunc((o.rateBps * (o.latencyUs ?? DEFAULT_LATENCY_US)) / 1_000_000 + o.burstBytes);
  const qopt = Buffer.concat([
    ratespec(o.rateBps, cellLog),
    Buffer.alloc(12), // peakrate: none
    u32(Math.min(limit, 0xffffffff)),
    u32(xmitTicks(o.rateBps, o.burstBytes)), // buffer, in ticks
    u32(0), // mtu: only meaningful with a peak rate
  ]);
  const options = [attr(TCA_TBF_PARMS, qopt), attr(TCA_TBF_BURST, u32(o.burstBytes))];
  if (o.rateBps > 0xffffffff) options.push(attr(TCA_TBF_RATE64, u64(BigInt(Math.trunc(o.rateBps)))));
  options.push(attr(TCA_TBF_RTAB, table));
  await addQdisc(ns, index, tcmsg(index, 0, TC_H.ROOT), 'tbf', options, `root rate ${o.rateBps}Bps burst ${o.burstBytes}`);
}

// --- ingress, htb --------------------------------------------------------------------

/** Adds the ingress qdisc (handle ffff:) that ingress filters hang from. EEXIST when present. */
export async function addIngress(ns: Netns, index: number): Promise<void> {
  await addQdisc(ns, index, tcmsg(index, INGRESS_HANDLE, TC_H.INGRESS), 'ingress', undefined, 'ffff:');
}

const TCA_HTB_INIT = 2;
/** tc_htb_glob.version: HTB_VER >> 16. */
const HTB_PROTOVER = 3;
const HTB_RATE2QUANTUM = 10;

export interface HtbOptions {
  /** Qdisc handle, e.g. handle(1) for "1:" (the default). */
  handle?: number;
  /** Minor number of the class unclassified traffic goes to (tc's "default"); 0 sends it unshaped. */
  defaultClass?: number;
}

/** Adds an htb root qdisc. EEXIST when a root qdisc was already added. */
export async function addHtb(ns: Netns, index: number, o: HtbOptions = {}): Promise<void> {
  const h = o.handle ?? handle(1);
  // struct tc_htb_glob { u32 version; u32 rate2quantum; u32 defcls; u32 debug; u32 direct_pkts; }
  const glob = Buffer.concat([u32(HTB_PROTOVER), u32(HTB_RATE2QUANTUM), u32(o.defaultClass ?? 0), u32(0), u32(0)]);
  await addQdisc(ns, index, tcmsg(index, h, TC_H.ROOT), 'htb', [attr(TCA_HTB_INIT, glob)], `root handle ${fmtHandle(h)}`);
}

// --- u32 + mirred redirect ----------------------------------------------------------------

const TCA_U32_CLASSID = 1;
const TCA_U32_SEL = 5;
const TCA_U32_ACT = 7;
const TC_U32_TERMINAL = 1;
const TCA_ACT_KIND = 1;
const TCA_ACT_OPTIONS = 2;
const TCA_MIRRED_PARMS = 2;
const TCA_EGRESS_REDIR = 1;
const TC_ACT_STOLEN = 4;
const ETH_P_ALL = 0x0003;

export interface RedirectOptions {
  /** The qdisc the filter attaches to: INGRESS_HANDLE for the ingress qdisc. */
  parent: number;
  /** Link that receives the packets (as its egress), usually an ifb. */
  targetIndex: number;
  /** Filter priority (default 1). */
  prio?: number;
  /** Optional flowid / classid (e.g. handle(1, 1)). */
  classId?: number;
}

/** tcm_info of a filter: priority in the upper half, protocol (network byte order) in the lower. */
function filterInfo(prio: number, protocol: number): number {
  const be = Buffer.alloc(2);
  be.writeUInt16BE(protocol);
  return ((prio << 16) | readU16(be)) >>> 0; // readU16 reads host order: htons()
}

/**
 * Adds "u32 match u32 0 0 action mirred egress redirect dev <target>" on `parent` of
 * link `index`: every packet is stolen and sent out of the target link.
 */
export async function addRedirectFilter(ns: Netns, index: number, o: RedirectOptions): Promise<void> {
  // struct tc_u32_sel (16 bytes) + one zeroed struct tc_u32_key (16 bytes): match everything.
  const sel = Buffer.alloc(32);
  sel[0] = TC_U32_TERMINAL;
  sel[2] = 1; // nkeys
  // struct tc_mirred { u32 index; u32 capab; s32 action; s32 refcnt; s32 bindcnt; s32 eaction; u32 ifindex; }
  const mirred = Buffer.concat([u32(0), u32(0), s32(TC_ACT_STOLEN), s32(0), s32(0), s32(TCA_EGRESS_REDIR), u32(o.targetIndex)]);
  const action = nest(1, attr(TCA_ACT_KIND, str('mirred')), nest(TCA_ACT_OPTIONS, attr(TCA_MIRRED_PARMS, mirred)));
  const options = [attr(TCA_U32_SEL, sel), nest(TCA_U32_ACT, action)];
  if (o.classId !== undefined) options.unshift(attr(TCA_U32_CLASSID, u32(o.classId)));
  const body = [tcmsg(index, 0, o.parent, filterInfo(o.prio ?? 1, ETH_P_ALL)), attr(TCA_KIND, str('u32')), nest(TCA_OPTIONS, ...options)];
  await request(ns, RTM.NEWTFILTER, NLM_F.CREATE | NLM_F.EXCL, Buffer.concat(body), {
    op: 'add filter',
    object: `u32 dev index ${index} parent ${fmtHandle(o.parent)} redirect to index ${o.targetIndex}`,
  });
}

// --- list / delete ------------------------------------------------------------------

export interface Qdisc {
  index: number;
  kind: string;
  handle: number;
  parent: number;
}

/** Qdiscs of every link, or of link `index`, including the kernel's defaults (noqueue...). */
export async function listQdiscs(ns: Netns, index?: number): Promise<Qdisc[]> {
  const replies = await dump(ns, RTM.GETQDISC, tcmsg(0, 0, 0), {
    op: 'list qdiscs',
    object: index === undefined ? 'all' : `dev index ${index}`,
  });
  const out: Qdisc[] = [];
  for (const r of replies) {
    if (r.type !== RTM.NEWQDISC) continue;
    const q: Qdisc = {
      index: readS32(r.data, 4),
      kind: readStr(parseAttrs(r.data, 20).get(TCA_KIND) ?? Buffer.alloc(0)),
      handle: readU32(r.data, 8),
      parent: readU32(r.data, 12),
    };
    if (index === undefined || q.index === index) out.push(q);
  }
  return out;
}

/** Deletes the root qdisc (and its classes and filters); ENOENT when only the default one is there. */
export async function delRootQdisc(ns: Netns, index: number): Promise<void> {
  await request(ns, RTM.DELQDISC, 0, tcmsg(index, 0, TC_H.ROOT), { op: 'del qdisc', object: `root dev index ${index}` });
}

/** Deletes the ingress qdisc and its filters; ENOENT when there is none. */
export async function delIngress(ns: Netns, index: number): Promise<void> {
  // Handle 0, not ffff:: the kernel compares a given handle with its placeholder (EINVAL) before saying ENOENT.
  await request(ns, RTM.DELQDISC, 0, tcmsg(index, 0, TC_H.INGRESS), { op: 'del qdisc', object: `ingress dev index ${index}` });
}
