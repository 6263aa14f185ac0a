/**
 * @cnikit/coil: Coil v2 (IPAM, routing, egress NAT) in TypeScript. The executables are src/cmd/coil.ts (`coil`),
 * src/cmd/coild.ts (`coild`), src/cmd/coil-ipam-controller.ts (`coil-ipam-controller`),
 * src/cmd/coil-egress-controller.ts (`coil-egress-controller`) and src/cmd/coil-egress.ts (`coil-egress`); see
 * docs/coil.md and docs/coil-egress.md.
 * The `coil` binary imports only ./cni and ./rpc (no Kubernetes client, no gRPC library).
 */
export * from './api/types';
export { coilCrds } from './api/crds';
export { BitmapAllocator } from './ipam/allocator';
export { blockAt, maxBlocks, nextFreeIndex, subnetBlocks, type BlockRange } from './ipam/pool';
export { IpamController, type IpamControllerOptions } from './controller/ipam-controller';
export { ipamLeaderTask } from './controller/leader';
export { Coild, type CoildOptions } from './coild/coild';
export { CoildServer, type CoildServerOptions } from './coild/server';
export { NodeIPAM, PoolExhaustedError, PoolNotFoundError, type Allocation, type OwnedBlock } from './coild/nodeipam';
export { PodNetwork, podAlias, parseAlias, hostVethName, type PodInfo, type PodNetworkConfig, type PodSpec } from './coild/podnetwork';
export { RouteExporter } from './coild/export';
export * from './rpc/codec';
export { unaryCall, RpcError, UnavailableError } from './rpc/client';
export * from './api/egress';
export { EgressController, type EgressControllerOptions } from './egress-controller/egress-controller';
export {
  EgressClient,
  defaultNatClient,
  type NatClient,
  type EgressPeer,
  type NatClientConfig,
  type EgressClientPod,
  type EgressClientOptions,
} from './coild/egress';
export { findPeerNetns, findNetnsById, nsidOf, candidateNetnsPaths } from './coild/netns-finder';
