/**
 * CiliumNode (cilium.io/v2, cluster-scoped, name = node name): the IPAM and ENI fields, JSON names as Cilium's.
 */
import { defineResource, type KubeObject } from '@cnikit/kube';

/** An entry of spec.ipam.pool or status.ipam.used: who owns the IP and which ENI holds it. */
export interface AllocationIP {
  owner?: string;
  resource?: string;
}

export type ReleaseState = 'marked-for-release' | 'ready-for-release' | 'do-not-release' | 'released';
export const RELEASE_STATES: readonly ReleaseState[] = ['marked-for-release', 'ready-for-release', 'do-not-release', 'released'];

export interface IpamSpec {
  pool?: Record<string, AllocationIP>;
  'min-allocate'?: number;
  'max-allocate'?: number;
  'pre-allocate'?: number;
  'max-above-watermark'?: number;
}

export interface EniSpec {
  'instance-id'?: string;
  'instance-type'?: string;
  'vpc-id'?: string;
  'availability-zone'?: string;
  'node-subnet-id'?: string;
  'first-interface-index'?: number;
  'subnet-ids'?: string[];
  'subnet-tags'?: Record<string, string>;
  'security-groups'?: string[];
  'security-group-tags'?: Record<string, string>;
  'exclude-interface-tags'?: Record<string, string>;
  'delete-on-termination'?: boolean;
  'use-primary-address'?: boolean;
  /** Ask for /28 prefixes (prefix delegation) instead of /32 secondary IPs. */
  'use-prefix-delegation'?: boolean;
}

export interface CiliumNodeSpec {
  'instance-id'?: string;
  ipam?: IpamSpec;
  eni?: EniSpec;
}

export interface EniSubnet {
  id: string;
  cidr?: string;
}
export interface EniVpc {
  id: string;
  'primary-cidr'?: string;
  cidrs?: string[];
}

export interface Eni {
  id: string;
  ip?: string;
  mac?: string;
  number: number;
  subnet: EniSubnet;
  vpc: EniVpc;
  addresses?: string[];
  prefixes?: string[];
  'security-groups'?: string[];
  tags?: Record<string, string>;
  description?: string;
}

export interface IpamStatus {
  used?: Record<string, AllocationIP>;
  'operator-status'?: { error?: string };
  'release-ips'?: Record<string, ReleaseState>;
}

export interface CiliumNodeStatus {
  ipam?: IpamStatus;
  eni?: { enis?: Record<string, Eni> };
}

export interface CiliumNode extends KubeObject {
  spec: CiliumNodeSpec;
  status?: CiliumNodeStatus;
}

export const CiliumNodes = defineResource<CiliumNode>({
  group: 'cilium.io',
  version: 'v2',
  kind: 'CiliumNode',
  plural: 'ciliumnodes',
  namespaced: false,
  shortNames: ['cn', 'ciliumn'],
});

/** Defaults (pkg/ipam): pre-allocate 8, max-above-watermark 0, delete-on-termination true. */
export const DEFAULT_PRE_ALLOCATE = 8;
export const DEFAULT_MAX_ABOVE_WATERMARK = 0;
