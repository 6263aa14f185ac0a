/**
 * The TerwayBackend gRPC service of Terway (package `rpc`), as a
 * protobuf JSON descriptor so no .proto file has to ship next to the
 * executables. Field names and numbers follow Terway's rpc.proto:
 *
 *   service TerwayBackend {
 *     rpc AllocIP (AllocIPRequest) returns (AllocIPReply);
 *     rpc ReleaseIP (ReleaseIPRequest) returns (ReleaseIPReply);
 *     rpc GetIPInfo (GetInfoRequest) returns (GetInfoReply);
 *     rpc RecordEvent (EventRequest) returns (EventReply);
 *   }
 *
 * and one call of ours, ListLeases (Terway has none like it): the leases pods hold with their sandboxes, which the
 * binary's CNI GC judges against the runtime's valid attachments (Terway leaves leaks to terwayd's own GC loop).
 *
 * No gRPC library here nor anywhere shipped: codec.ts encodes and decodes these messages by hand for the terway
 * binary and terwayd (@cnikit/unary-grpc's client and server); the tests load the descriptor into proto-loader
 * and @grpc/grpc-js to check them (test/grpc-descriptors.ts).
 */

type Fields = Record<string, string>;

/** Fields numbered in order of declaration; "repeated X" for lists. */
function msg(f: Fields): { fields: Record<string, { type: string; id: number; rule?: string }> } {
  const fields: Record<string, { type: string; id: number; rule?: string }> = {};
  Object.entries(f).forEach(([name, type], i) => {
    const rep = type.startsWith('repeated ');
    fields[name] = { type: rep ? type.slice(9) : type, id: i + 1, ...(rep ? { rule: 'repeated' } : {}) };
  });
  return { fields };
}

const podRef: Fields = {
  K8sPodName: 'string',
  K8sPodNamespace: 'string',
  K8sPodInfraContainerId: 'string',
  Netns: 'string',
  IfName: 'string',
};

export const TERWAY_DESCRIPTOR = {
  nested: {
    rpc: {
      nested: {
        TerwayBackend: {
          methods: {
            AllocIP: { requestType: 'AllocIPRequest', responseType: 'AllocIPReply' },
            ReleaseIP: { requestType: 'ReleaseIPRequest', responseType: 'ReleaseIPReply' },
            GetIPInfo: { requestType: 'GetInfoRequest', responseType: 'GetInfoReply' },
            RecordEvent: { requestType: 'EventRequest', responseType: 'EventReply' },
            ListLeases: { requestType: 'ListLeasesRequest', responseType: 'ListLeasesReply' },
          },
        },
        IPType: { values: { TypeVPCIP: 0, TypeVPCENI: 1, TypeENIMultiIP: 2 } },
        EventTarget: { values: { EventTargetNode: 0, EventTargetPod: 1 } },
        EventType: { values: { EventTypeNormal: 0, EventTypeWarning: 1 } },
        AllocIPRequest: msg(podRef),
        ReleaseIPRequest: msg({ ...podRef, Reason: 'string' }),
        GetInfoRequest: msg(podRef),
        IPSet: msg({ IPv4: 'string', IPv6: 'string' }),
        BasicInfo: msg({ PodIP: 'IPSet', PodCIDR: 'IPSet', GatewayIP: 'IPSet', ServiceCIDR: 'IPSet' }),
        ENIInfo: msg({ MAC: 'string', Trunk: 'bool', Vid: 'uint32', GatewayIP: 'IPSet' }),
        Pod: msg({ Ingress: 'uint64', Egress: 'uint64', NetworkPriority: 'string' }),
        Route: msg({ Dst: 'string' }),
        NetConf: msg({
          BasicInfo: 'BasicInfo',
          ENIInfo: 'ENIInfo',
          Pod: 'Pod',
          IfName: 'string',
          ExtraRoutes: 'repeated Route',
          DefaultRoute: 'bool',
        }),
        AllocIPReply: msg({ Success: 'bool', IPType: 'IPType', IPv4: 'bool', IPv6: 'bool', NetConfs: 'repeated NetConf' }),
        ReleaseIPReply: msg({ Success: 'bool', IPv4: 'bool', IPv6: 'bool' }),
        // ContainerId (ours, field 7): the sandbox holding the lease, so a DEL of an older sandbox leaves the live one alone.
        GetInfoReply: msg({
          IPType: 'IPType',
          Success: 'bool',
          IPv4: 'bool',
          IPv6: 'bool',
          NetConfs: 'repeated NetConf',
          Error: 'string',
          ContainerId: 'string',
        }),
        EventRequest: msg({
          EventTarget: 'EventTarget',
          K8sPodName: 'string',
          K8sPodNamespace: 'string',
          EventType: 'EventType',
          Reason: 'string',
          Message: 'string',
        }),
        EventReply: msg({ Succeed: 'bool', Error: 'string' }),
        ListLeasesRequest: msg({}),
        PodLease: msg({
          K8sPodNamespace: 'string',
          K8sPodName: 'string',
          ContainerId: 'string',
          Netns: 'string',
          IPv4: 'string',
          IPv6: 'string',
        }),
        ListLeasesReply: msg({ Leases: 'repeated PodLease' }),
      },
    },
  },
};

export const DEFAULT_SOCKET = '/var/run/eni/eni.socket';

// Plain shapes of the messages (proto-loader: keepCase, enums as strings, longs as numbers).
export interface PodRef {
  K8sPodName: string;
  K8sPodNamespace: string;
  K8sPodInfraContainerId: string;
  Netns: string;
  IfName: string;
}
export interface IPSet {
  IPv4: string;
  IPv6: string;
}
export interface NetConf {
  BasicInfo: { PodIP: IPSet; PodCIDR: IPSet; GatewayIP: IPSet; ServiceCIDR: IPSet | null } | null;
  ENIInfo: { MAC: string; Trunk: boolean; Vid: number; GatewayIP: IPSet } | null;
  Pod: { Ingress: number; Egress: number; NetworkPriority: string } | null;
  IfName: string;
  ExtraRoutes: { Dst: string }[];
  DefaultRoute: boolean;
}
export interface AllocIPReply {
  Success: boolean;
  IPType: string;
  IPv4: boolean;
  IPv6: boolean;
  NetConfs: NetConf[];
}
export interface ReleaseIPReply {
  Success: boolean;
  IPv4: boolean;
  IPv6: boolean;
}
/**
 * GetInfoReply.Error of a pod without a lease while no address can be had (the pool backing off from a failed
 * cloud call with nothing idle): what the binary's STATUS reports.
 */
export const POOL_UNAVAILABLE = 'no address can be had now: ';

/** ContainerId: the sandbox (K8sPodInfraContainerId) whose AllocIP holds the lease; '' when unknown. */
export interface GetInfoReply {
  IPType: string;
  Success: boolean;
  IPv4: boolean;
  IPv6: boolean;
  NetConfs: NetConf[];
  Error: string;
  ContainerId: string;
}
export interface EventRequest {
  EventTarget: string;
  K8sPodName: string;
  K8sPodNamespace: string;
  EventType: string;
  Reason: string;
  Message: string;
}
export interface EventReply {
  Succeed: boolean;
  Error: string;
}
/** A lease a pod holds: its sandbox ('' when stored before sandboxes were recorded) and the netns its AllocIP named. */
export interface PodLease {
  K8sPodNamespace: string;
  K8sPodName: string;
  ContainerId: string;
  Netns: string;
  IPv4: string;
  IPv6: string;
}
export interface ListLeasesReply {
  Leases: PodLease[];
}
