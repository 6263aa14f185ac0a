/**
 * coil.cybozu.com/v2 resources (AddressPool, AddressBlock, BlockRequest) and the names, labels and
 * finalizer every Coil program shares. Names and fields follow today's Coil v2.
 */
import { defineResource, type CustomObject, type KubeObject } from '@cnikit/kube';

export const GROUP = 'coil.cybozu.com';
export const VERSION = 'v2';
export const FINALIZER = 'coil.cybozu.com';
export const LABEL_POOL = 'coil.cybozu.com/pool';
export const LABEL_NODE = 'coil.cybozu.com/node';
export const LABEL_REQUEST = 'coil.cybozu.com/request';
export const LABEL_RESERVED = 'coil.cybozu.com/reserved';
/** Namespace annotation choosing the pool of its pods. */
export const ANNOTATION_POOL = 'coil.cybozu.com/pool';
export const DEFAULT_POOL = 'default';
/** How long coild waits for the controller to answer a BlockRequest. */
export const BLOCK_REQUEST_TIMEOUT_MS = 10_000;

export interface SubnetSet {
  ipv4?: string;
  ipv6?: string;
}
export interface AddressPoolSpec {
  blockSizeBits: number;
  subnets: SubnetSet[];
}
export type AddressPool = CustomObject<AddressPoolSpec, Record<string, never>>;

/** No spec: index and addresses are top-level fields. */
export interface AddressBlock extends KubeObject {
  index: number;
  ipv4?: string;
  ipv6?: string;
}

export interface BlockRequestCondition {
  type: 'Complete' | 'Failed';
  status: 'True' | 'False' | 'Unknown';
  reason?: string;
  message?: string;
  lastProbeTime?: string;
  lastTransitionTime?: string;
}
export interface BlockRequestSpec {
  nodeName: string;
  poolName: string;
}
export interface BlockRequestStatus {
  addressBlockName?: string;
  conditions?: BlockRequestCondition[];
}
export type BlockRequest = CustomObject<BlockRequestSpec, BlockRequestStatus>;

export const AddressPools = defineResource<AddressPool>({
  group: GROUP,
  version: VERSION,
  kind: 'AddressPool',
  plural: 'addresspools',
  namespaced: false,
});
export const AddressBlocks = defineResource<AddressBlock>({
  group: GROUP,
  version: VERSION,
  kind: 'AddressBlock',
  plural: 'addressblocks',
  namespaced: false,
});
export const BlockRequests = defineResource<BlockRequest>({
  group: GROUP,
  version: VERSION,
  kind: 'BlockRequest',
  plural: 'blockrequests',
  namespaced: false,
});

export const blockName = (pool: string, index: number): string => `${pool}-${index}`;
export const requestName = (pool: string, node: string): string => `req-${pool}-${node}`;

/** The request's final condition, if it has one: Complete or Failed with status True. */
export function requestOutcome(req: BlockRequest): BlockRequestCondition | undefined {
  return req.status?.conditions?.find((c) => (c.type === 'Complete' || c.type === 'Failed') && c.status === 'True');
}

const DNS1123 = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
/** A pool name as an annotation may carry it (DNS-1123 subdomain, <= 253 chars). */
export const isValidPoolName = (s: string): boolean => s.length > 0 && s.length <= 253 && DNS1123.test(s);
