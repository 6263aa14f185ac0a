/**
 * @cnikit/cilium-eni-ipam: Cilium-style AWS ENI IPAM. The operator fills each CiliumNode's pool from EC2
 * (pre-allocation watermark, surge, rate-limited EC2 calls, release handshake, ENI GC); the agent hands
 * IPs from that pool to the CNI IPAM plugin over a UNIX socket. Testing helpers: ./testing.
 */
export * from './types';
export * from './crd';
export * from './prealloc';
export * from './limits';
export * from './rate-limit';
export * from './ec2';
export * from './subnets';
export * from './node-sync';
export * from './operator';
export * from './pool';
export * from './agent-client';
export * from './agent';
export * from './config';
export * from './routing';
