/**
 * @cnikit/terway: Terway's ENI multi-IP pool, the Alibaba ECS/VPC OpenAPI
 * client (our own, V3-signed RPC over node:https; its emulator is
 * @cnikit/aliyun-emulator, outside what ships), the veth policy-routing datapath with tbf bandwidth, terwayd and the
 * terway CNI binary's gRPC client.
 */
export * from './clock';
export * from './pool';
export * from './cloud';
export * from './datapath';
export * from './rpc/proto';
export { TerwayClient, CLIENT_TIMEOUT_MS } from './cni/client';
export { TerwayDaemon, RESERVATION_ANNOTATION, RESERVE_MS, type PodMeta, type PodSource } from './daemon/daemon';
export { TerwayServer } from './daemon/server';
export { LeaseStore, type StoredLease } from './daemon/store';
export { startTerwayd, type Terwayd, type TerwaydOptions } from './daemon/bootstrap';
export { EniDevicePlugin, ENI_RESOURCE, MEMBER_ENI_RESOURCE } from './deviceplugin/plugin';
export { kubePodSource } from './daemon/kube-pods';
