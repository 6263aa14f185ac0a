/**
 * rpc.TerwayBackend's protobuf codec, hand-written on @cnikit/unary-grpc's wire primitives, field numbers
 * as in proto.ts's descriptor (Terway's rpc.proto), both directions:
 * - the terway binary's: the requests it sends (encode*Request, encodePodRef) and the replies it reads (decode*Reply);
 * - terwayd's: the requests it serves (decode*Request) and the replies it answers (encode*Reply).
 * Messages decode to the shapes proto-loader gives (keepCase, enums as their names, 64-bit integers as
 * numbers, absent messages as null, absent lists as [], absent scalars at their defaults), and encode as
 * protobufjs reads them back (defaults left out, proto3 fashion, where protobufjs writes every field set,
 * '' and false included: the same message to any reader; a present sub-message is sent even when empty;
 * enums by name or number). test/rpc-codec.test.ts checks every direction against proto-loader, which ships nowhere.
 */
import { ProtoWriter, protoBool, protoBytes, protoFields, protoNumber, protoString } from '@cnikit/unary-grpc';
import { TERWAY_DESCRIPTOR, type AllocIPReply, type EventReply, type EventRequest, type GetInfoReply } from './proto';
import type { IPSet, ListLeasesReply, NetConf, PodLease, PodRef, ReleaseIPReply } from './proto';

/** An enum's names indexed by number, from the descriptor terwayd serves. */
const enumNames = (values: Record<string, number>): string[] =>
  Object.entries(values).reduce<string[]>((names, [name, n]) => ((names[n] = name), names), []);
const IP_TYPES = enumNames(TERWAY_DESCRIPTOR.nested.rpc.nested.IPType.values);
const EVENT_TARGETS = enumNames(TERWAY_DESCRIPTOR.nested.rpc.nested.EventTarget.values);
const EVENT_TYPES = enumNames(TERWAY_DESCRIPTOR.nested.rpc.nested.EventType.values);

/** An enum's name for its number, the number itself (as proto-loader) when the name is not known here. */
const enumName = (names: string[], n: number): string => names[n] ?? String(n);
const enumNumber = (names: string[], name: string | number): number => (typeof name === 'number' ? name : Math.max(0, names.indexOf(name)));

/** AllocIPRequest and GetInfoRequest are a PodRef; ReleaseIPRequest adds Reason (field 6). */
export function encodePodRef(r: PodRef & { Reason?: string }): Buffer {
  return new ProtoWriter()
    .bytes(1, r.K8sPodName)
    .bytes(2, r.K8sPodNamespace)
    .bytes(3, r.K8sPodInfraContainerId)
    .bytes(4, r.Netns)
    .bytes(5, r.IfName)
    .bytes(6, r.Reason ?? '')
    .finish();
}

export function encodeEventRequest(e: EventRequest): Buffer {
  return new ProtoWriter()
    .uint(1, enumNumber(EVENT_TARGETS, e.EventTarget))
    .bytes(2, e.K8sPodName)
    .bytes(3, e.K8sPodNamespace)
    .uint(4, enumNumber(EVENT_TYPES, e.EventType))
    .bytes(5, e.Reason)
    .bytes(6, e.Message)
    .finish();
}

function decodeIPSet(buf: Buffer): IPSet {
  const s: IPSet = { IPv4: '', IPv6: '' };
  for (const f of protoFields(buf)) {
    if (f.field === 1) s.IPv4 = protoString(f.value);
    else if (f.field === 2) s.IPv6 = protoString(f.value);
  }
  return s;
}

type BasicInfo = NonNullable<NetConf['BasicInfo']>;
function decodeBasicInfo(buf: Buffer): BasicInfo {
  const sets: (IPSet | null)[] = [null, null, null, null];
  for (const f of protoFields(buf)) if (f.field >= 1 && f.field <= 4) sets[f.field - 1] = decodeIPSet(protoBytes(f.value));
  // proto-loader leaves an absent IPSet null; the CNI side reads every one through `?.`.
  const [PodIP, PodCIDR, GatewayIP, ServiceCIDR] = sets as [IPSet, IPSet, IPSet, IPSet | null];
  return { PodIP, PodCIDR, GatewayIP, ServiceCIDR };
}

type ENIInfo = NonNullable<NetConf['ENIInfo']>;
function decodeENIInfo(buf: Buffer): ENIInfo {
  const e = { MAC: '', Trunk: false, Vid: 0, GatewayIP: null as IPSet | null };
  for (const f of protoFields(buf)) {
    if (f.field === 1) e.MAC = protoString(f.value);
    else if (f.field === 2) e.Trunk = protoBool(f.value);
    else if (f.field === 3) e.Vid = protoNumber(f.value);
    else if (f.field === 4) e.GatewayIP = decodeIPSet(protoBytes(f.value));
  }
  return e as ENIInfo;
}

type PodLimits = NonNullable<NetConf['Pod']>;
function decodePod(buf: Buffer): PodLimits {
  const p: PodLimits = { Ingress: 0, Egress: 0, NetworkPriority: '' };
  for (const f of protoFields(buf)) {
    if (f.field === 1) p.Ingress = protoNumber(f.value);
    else if (f.field === 2) p.Egress = protoNumber(f.value);
    else if (f.field === 3) p.NetworkPriority = protoString(f.value);
  }
  return p;
}

function decodeNetConf(buf: Buffer): NetConf {
  const c: NetConf = { BasicInfo: null, ENIInfo: null, Pod: null, IfName: '', ExtraRoutes: [], DefaultRoute: false };
  for (const f of protoFields(buf)) {
    if (f.field === 1) c.BasicInfo = decodeBasicInfo(protoBytes(f.value));
    else if (f.field === 2) c.ENIInfo = decodeENIInfo(protoBytes(f.value));
    else if (f.field === 3) c.Pod = decodePod(protoBytes(f.value));
    else if (f.field === 4) c.IfName = protoString(f.value);
    else if (f.field === 5) c.ExtraRoutes.push({ Dst: routeDst(protoBytes(f.value)) });
    else if (f.field === 6) c.DefaultRoute = protoBool(f.value);
  }
  return c;
}

function routeDst(buf: Buffer): string {
  let dst = '';
  for (const f of protoFields(buf)) if (f.field === 1) dst = protoString(f.value);
  return dst;
}

export function decodeAllocIPReply(buf: Buffer): AllocIPReply {
  const r: AllocIPReply = { Success: false, IPType: IP_TYPES[0]!, IPv4: false, IPv6: false, NetConfs: [] };
  for (const f of protoFields(buf)) {
    if (f.field === 1) r.Success = protoBool(f.value);
    else if (f.field === 2) r.IPType = enumName(IP_TYPES, protoNumber(f.value));
    else if (f.field === 3) r.IPv4 = protoBool(f.value);
    else if (f.field === 4) r.IPv6 = protoBool(f.value);
    else if (f.field === 5) r.NetConfs.push(decodeNetConf(protoBytes(f.value)));
  }
  return r;
}

export function decodeReleaseIPReply(buf: Buffer): ReleaseIPReply {
  const r: ReleaseIPReply = { Success: false, IPv4: false, IPv6: false };
  for (const f of protoFields(buf)) {
    if (f.field === 1) r.Success = protoBool(f.value);
    else if (f.field === 2) r.IPv4 = protoBool(f.value);
    else if (f.field === 3) r.IPv6 = protoBool(f.value);
  }
  return r;
}

export function decodeGetInfoReply(buf: Buffer): GetInfoReply {
  const r: GetInfoReply = { IPType: IP_TYPES[0]!, Success: false, IPv4: false, IPv6: false, NetConfs: [], Error: '', ContainerId: '' };
  for (const f of protoFields(buf)) {
    if (f.field === 1) r.IPType = enumName(IP_TYPES, protoNumber(f.value));
    else if (f.field === 2) r.Success = protoBool(f.value);
    else if (f.field === 3) r.IPv4 = protoBool(f.value);
    else if (f.field === 4) r.IPv6 = protoBool(f.value);
    else if (f.field === 5) r.NetConfs.push(decodeNetConf(protoBytes(f.value)));
    else if (f.field === 6) r.Error = protoString(f.value);
    else if (f.field === 7) r.ContainerId = protoString(f.value);
  }
  return r;
}

export function decodeEventReply(buf: Buffer): EventReply {
  const r: EventReply = { Succeed: false, Error: '' };
  for (const f of protoFields(buf)) {
    if (f.field === 1) r.Succeed = protoBool(f.value);
    else if (f.field === 2) r.Error = protoString(f.value);
  }
  return r;
}

function decodePodLease(buf: Buffer): PodLease {
  const l: PodLease = { K8sPodNamespace: '', K8sPodName: '', ContainerId: '', Netns: '', IPv4: '', IPv6: '' };
  const names = ['K8sPodNamespace', 'K8sPodName', 'ContainerId', 'Netns', 'IPv4', 'IPv6'] as const;
  for (const f of protoFields(buf)) {
    const name = names[f.field - 1];
    if (name) l[name] = protoString(f.value);
  }
  return l;
}

export function decodeListLeasesReply(buf: Buffer): ListLeasesReply {
  const r: ListLeasesReply = { Leases: [] };
  for (const f of protoFields(buf)) if (f.field === 1) r.Leases.push(decodePodLease(protoBytes(f.value)));
  return r;
}

// ---- terwayd's side: requests decoded, replies encoded ----

const POD_REF_FIELDS = ['K8sPodName', 'K8sPodNamespace', 'K8sPodInfraContainerId', 'Netns', 'IfName'] as const;

/** AllocIPRequest, GetInfoRequest: a PodRef, every field present ('' when absent), as proto-loader gives it. */
export function decodePodRef(buf: Buffer): PodRef {
  const r: PodRef = { K8sPodName: '', K8sPodNamespace: '', K8sPodInfraContainerId: '', Netns: '', IfName: '' };
  for (const f of protoFields(buf)) {
    const name = POD_REF_FIELDS[f.field - 1];
    if (name) r[name] = protoString(f.value);
  }
  return r;
}

/** ReleaseIPRequest: a PodRef and Reason (field 6). */
export function decodeReleaseIPRequest(buf: Buffer): PodRef & { Reason: string } {
  const r = { ...decodePodRef(buf), Reason: '' };
  for (const f of protoFields(buf)) if (f.field === 6) r.Reason = protoString(f.value);
  return r;
}

/** An enum's name for its number; proto-loader leaves a number it has no name for a number. */
const requestEnum = (names: string[], n: number): string => names[n] ?? (n as unknown as string);

export function decodeEventRequest(buf: Buffer): EventRequest {
  const e: EventRequest = {
    EventTarget: EVENT_TARGETS[0]!,
    K8sPodName: '',
    K8sPodNamespace: '',
    EventType: EVENT_TYPES[0]!,
    Reason: '',
    Message: '',
  };
  for (const f of protoFields(buf)) {
    if (f.field === 1) e.EventTarget = requestEnum(EVENT_TARGETS, protoNumber(f.value));
    else if (f.field === 2) e.K8sPodName = protoString(f.value);
    else if (f.field === 3) e.K8sPodNamespace = protoString(f.value);
    else if (f.field === 4) e.EventType = requestEnum(EVENT_TYPES, protoNumber(f.value));
    else if (f.field === 5) e.Reason = protoString(f.value);
    else if (f.field === 6) e.Message = protoString(f.value);
  }
  return e;
}

/**
 * The replies as terwayd's handlers make them: loosely (fields left out, messages null or undefined), as
 * protobufjs's fromObject took them; `Partial` all the way down.
 */
type Loose<T> = T extends (infer E)[] ? Loose<E>[] : T extends object ? { [K in keyof T]?: Loose<T[K]> | null } : T;

/** A sub-message field: left out when null or undefined, sent (even empty) when present. */
function message<T>(w: ProtoWriter, field: number, v: T | null | undefined, encode: (v: T) => Buffer): ProtoWriter {
  return v === null || v === undefined ? w : w.bytes(field, encode(v), true);
}

const encodeIPSet = (s: Loose<IPSet>): Buffer =>
  new ProtoWriter()
    .bytes(1, s.IPv4 ?? '')
    .bytes(2, s.IPv6 ?? '')
    .finish();

function encodeNetConf(c: Loose<NetConf>): Buffer {
  const w = new ProtoWriter();
  message(w, 1, c.BasicInfo, (b) => {
    const bw = new ProtoWriter();
    message(bw, 1, b.PodIP, encodeIPSet);
    message(bw, 2, b.PodCIDR, encodeIPSet);
    message(bw, 3, b.GatewayIP, encodeIPSet);
    message(bw, 4, b.ServiceCIDR, encodeIPSet);
    return bw.finish();
  });
  message(w, 2, c.ENIInfo, (e) =>
    message(
      new ProtoWriter()
        .bytes(1, e.MAC ?? '')
        .bool(2, e.Trunk ?? false)
        .uint(3, e.Vid ?? 0),
      4,
      e.GatewayIP,
      encodeIPSet,
    ).finish(),
  );
  message(w, 3, c.Pod, (p) =>
    new ProtoWriter()
      .uint(1, p.Ingress ?? 0)
      .uint(2, p.Egress ?? 0)
      .bytes(3, p.NetworkPriority ?? '')
      .finish(),
  );
  w.bytes(4, c.IfName ?? '');
  for (const r of c.ExtraRoutes ?? []) w.bytes(5, new ProtoWriter().bytes(1, r?.Dst ?? '').finish(), true);
  w.bool(6, c.DefaultRoute ?? false);
  return w.finish();
}

function netConfs(w: ProtoWriter, field: number, confs: Loose<NetConf>[] | null | undefined): ProtoWriter {
  for (const c of confs ?? []) w.bytes(field, encodeNetConf(c ?? {}), true);
  return w;
}

export function encodeAllocIPReply(r: Loose<AllocIPReply>): Buffer {
  const w = new ProtoWriter()
    .bool(1, r.Success ?? false)
    .uint(2, enumNumber(IP_TYPES, r.IPType ?? 0))
    .bool(3, r.IPv4 ?? false)
    .bool(4, r.IPv6 ?? false);
  return netConfs(w, 5, r.NetConfs).finish();
}

export function encodeReleaseIPReply(r: Loose<ReleaseIPReply>): Buffer {
  return new ProtoWriter()
    .bool(1, r.Success ?? false)
    .bool(2, r.IPv4 ?? false)
    .bool(3, r.IPv6 ?? false)
    .finish();
}

export function encodeGetInfoReply(r: Loose<GetInfoReply>): Buffer {
  const w = new ProtoWriter()
    .uint(1, enumNumber(IP_TYPES, r.IPType ?? 0))
    .bool(2, r.Success ?? false)
    .bool(3, r.IPv4 ?? false)
    .bool(4, r.IPv6 ?? false);
  return netConfs(w, 5, r.NetConfs)
    .bytes(6, r.Error ?? '')
    .bytes(7, r.ContainerId ?? '')
    .finish();
}

export function encodeEventReply(r: Loose<EventReply>): Buffer {
  return new ProtoWriter()
    .bool(1, r.Succeed ?? false)
    .bytes(2, r.Error ?? '')
    .finish();
}

const POD_LEASE_FIELDS = ['K8sPodNamespace', 'K8sPodName', 'ContainerId', 'Netns', 'IPv4', 'IPv6'] as const;

export function encodeListLeasesReply(r: Loose<ListLeasesReply>): Buffer {
  const w = new ProtoWriter();
  for (const l of r.Leases ?? []) {
    const lw = new ProtoWriter();
    if (l) POD_LEASE_FIELDS.forEach((name, i) => lw.bytes(i + 1, l[name] ?? ''));
    w.bytes(1, lw.finish(), true);
  }
  return w.finish();
}
