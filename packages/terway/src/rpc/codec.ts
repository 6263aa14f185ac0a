/**
 * The terway binary's protobuf codec for rpc.TerwayBackend, hand-written on @cnikit/unary-grpc's wire
 * primitives: the requests it sends and the replies it reads, field numbers as in proto.ts's descriptor
 * (Terway's rpc.proto). Replies decode to the shapes terwayd's proto-loader gives (keepCase, enums as
 * their names, 64-bit integers as numbers, absent messages as null, absent lists as []), so the CNI side
 * reads them exactly as it read grpc-js's. test/rpc-codec.test.ts checks both against proto-loader.
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
const enumNumber = (names: string[], name: string): number => Math.max(0, names.indexOf(name));

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
