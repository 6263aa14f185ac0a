/**
 * The API of gcp-ipam: the IPPool and IPAllocation custom resources (ipam.gcp-cni.cast.ai/v1alpha1, both
 * cluster-scoped), object naming, labels and the live-migration annotations.
 *
 * One IPAllocation per allocated IP, named from the pool and the IP: creating it is the claim (the API server's
 * name uniqueness is the lock, AlreadyExists means taken), deleting it is the release. No object is written by
 * every ADD, so nodes allocate concurrently without a shared resourceVersion (CAST AI's gcp-cni kept every allocation
 * in the IPPool object: one hot spot, capped by etcd's object size).
 */

export const GROUP = 'ipam.gcp-cni.cast.ai';
export const VERSION = 'v1alpha1';
export const API_VERSION = `${GROUP}/${VERSION}`;

export interface ObjectMetaLite {
  name: string;
  uid?: string;
  resourceVersion?: string;
  creationTimestamp?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  ownerReferences?: { apiVersion: string; kind: string; name: string; uid: string; controller?: boolean }[];
}

export interface IPPoolSpec {
  /** The pool's range, e.g. 10.111.0.0/16: the subnet's secondary range. */
  cidr: string;
  /** projects/{project}/regions/{region}/subnetworks/{name} */
  subnet: string;
  /** Name of the subnet's secondary range aliases are taken from (gcp-cni's default: "live"). */
  secondaryRangeName: string;
}

export interface IPPoolStatus {
  capacity?: number;
  allocated?: number;
  available?: number;
  lastUpdated?: string;
}

export interface IPPool {
  apiVersion?: string;
  kind?: string;
  metadata: ObjectMetaLite;
  spec: IPPoolSpec;
  status?: IPPoolStatus;
}

/** Allocated: attached (or being attached) to spec.instance. Migrating: moving from spec.migration.fromInstance. */
export type AllocationPhase = 'Allocated' | 'Migrating';

export interface IPAllocationSpec {
  pool: string;
  ip: string;
  podName: string;
  podNamespace: string;
  podUID: string;
  nodeName: string;
  /** UID of the pod's controller (ReplicaSet, StatefulSet...): a migration destination must share it. */
  podOwnerUID?: string;
  /** GCE instance (and its zone) whose NIC carries the /32 alias. */
  instance: string;
  zone: string;
  containerID: string;
  ifName: string;
  allocatedAt: string;
  phase: AllocationPhase;
  /** Set by a source DEL that saw live.cast.ai/move-out-ip: the pool entry is kept for the destination. */
  movingOut?: boolean;
  migration?: { fromInstance: string; fromPod: string; fromPodUID: string; startedAt: string };
}

export interface IPAllocation {
  apiVersion?: string;
  kind?: string;
  metadata: ObjectMetaLite;
  spec: IPAllocationSpec;
}

export const POOL_PLURAL = 'ippools';
export const ALLOC_PLURAL = 'ipallocations';

export const LABEL_POOL = `${GROUP}/pool`;
export const LABEL_NODE = `${GROUP}/node`;

export const ANN_IP = 'live.cast.ai/ip';
export const ANN_ORIGINAL_INSTANCE = 'live.cast.ai/original-instance';
export const ANN_MOVE_OUT_IP = 'live.cast.ai/move-out-ip';

/** ippool "live", 10.111.0.5 -> "live.10-111-0-5" (a DNS subdomain: the pool name is one too). */
export function allocationName(pool: string, ip: string): string {
  return `${pool}.${ip.replace(/[.:]/g, '-')}`;
}

/** Label values: at most 63 characters of [A-Za-z0-9._-], starting and ending alphanumeric. */
export function labelValue(v: string): string {
  const s = v
    .replace(/[^A-Za-z0-9._-]/g, '-')
    .slice(0, 63)
    .replace(/^[^A-Za-z0-9]+|[^A-Za-z0-9]+$/g, '');
  return s || 'none';
}
