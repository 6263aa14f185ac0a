/**
 * One definition per resource: group/version/kind/plural and scope. Typed clients, informers and CRD
 * manifests are all derived from it, so the names are written once.
 */

/** The wire (JSON) form of metav1.ObjectMeta; timestamps stay RFC 3339 strings. */
export interface ObjectMeta {
  name?: string;
  generateName?: string;
  namespace?: string;
  uid?: string;
  resourceVersion?: string;
  generation?: number;
  creationTimestamp?: string;
  deletionTimestamp?: string;
  deletionGracePeriodSeconds?: number;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  finalizers?: string[];
  ownerReferences?: OwnerReference[];
  managedFields?: unknown[];
}

export interface OwnerReference {
  apiVersion: string;
  kind: string;
  name: string;
  uid: string;
  controller?: boolean;
  blockOwnerDeletion?: boolean;
}

export interface KubeObject {
  apiVersion?: string;
  kind?: string;
  metadata: ObjectMeta;
}

/** A custom resource with spec and status. */
export interface CustomObject<Spec, Status = Record<string, unknown>> extends KubeObject {
  spec: Spec;
  status?: Status;
}

export interface ListMeta {
  resourceVersion?: string;
  continue?: string;
  remainingItemCount?: number;
}

export interface KubeList<T> {
  apiVersion?: string;
  kind?: string;
  metadata: ListMeta;
  items: T[];
}

export interface ResourceDefinition {
  /** API group; "" for the core group (pods, configmaps, ...). */
  group: string;
  version: string;
  kind: string;
  /** Lower-case plural used in URLs. */
  plural: string;
  /** Default kind.toLowerCase(). */
  singular?: string;
  namespaced: boolean;
  /** Default `${kind}List`. */
  listKind?: string;
  shortNames?: string[];
  categories?: string[];
}

/** A resource definition carrying the TypeScript type of its objects. */
export interface Resource<T extends KubeObject> extends Required<Omit<ResourceDefinition, 'shortNames' | 'categories'>> {
  shortNames: string[];
  categories: string[];
  /** "group/version", or "version" for the core group. */
  apiVersion: string;
  /** "plural.group" (the CRD's name), or the plural for the core group. */
  fullName: string;
  /** Phantom: only carries T for type inference. */
  readonly __type?: T;
}

export function defineResource<T extends KubeObject>(def: ResourceDefinition): Resource<T> {
  for (const field of ['version', 'kind', 'plural'] as const) {
    if (!def[field]) throw new TypeError(`kube: resource definition: ${field} is required, got ${JSON.stringify(def[field])}`);
  }
  if (def.plural !== def.plural.toLowerCase()) {
    throw new TypeError(`kube: resource definition: plural must be lower case, got ${JSON.stringify(def.plural)}`);
  }
  return Object.freeze({
    group: def.group,
    version: def.version,
    kind: def.kind,
    plural: def.plural,
    singular: def.singular ?? def.kind.toLowerCase(),
    namespaced: def.namespaced,
    listKind: def.listKind ?? `${def.kind}List`,
    shortNames: def.shortNames ?? [],
    categories: def.categories ?? [],
    apiVersion: def.group ? `${def.group}/${def.version}` : def.version,
    fullName: def.group ? `${def.plural}.${def.group}` : def.plural,
  });
}

/** URL path of a collection or object: /api/v1/namespaces/ns/pods/name/status. */
export function resourcePath(res: ResourceDefinition, opts: { namespace?: string; name?: string; subresource?: string } = {}): string {
  let p = res.group ? `/apis/${res.group}/${res.version}` : `/api/${res.version}`;
  if (res.namespaced && opts.namespace) p += `/namespaces/${encodeURIComponent(opts.namespace)}`;
  p += `/${res.plural}`;
  if (opts.name !== undefined) {
    if (opts.name === '') throw new TypeError(`kube: ${res.kind}: empty object name`);
    p += `/${encodeURIComponent(opts.name)}`;
    if (opts.subresource) p += `/${opts.subresource}`;
  }
  return p;
}

/** Cache key like client-go's MetaNamespaceKeyFunc: "namespace/name", or "name" for cluster-scoped objects. */
export function objectKey(obj: KubeObject): string {
  const { namespace, name } = obj.metadata;
  return namespace ? `${namespace}/${name ?? ''}` : (name ?? '');
}

/** Splits a key made by objectKey. */
export function splitKey(key: string): { namespace?: string; name: string } {
  const i = key.indexOf('/');
  return i < 0 ? { name: key } : { namespace: key.slice(0, i), name: key.slice(i + 1) };
}

// Built-in resources the kit itself and the CNI controllers use.

export interface ConfigMap extends KubeObject {
  data?: Record<string, string>;
  binaryData?: Record<string, string>;
}
export const ConfigMaps = defineResource<ConfigMap>({
  group: '',
  version: 'v1',
  kind: 'ConfigMap',
  plural: 'configmaps',
  namespaced: true,
});

export interface Secret extends KubeObject {
  type?: string;
  data?: Record<string, string>;
  stringData?: Record<string, string>;
}
export const Secrets = defineResource<Secret>({ group: '', version: 'v1', kind: 'Secret', plural: 'secrets', namespaced: true });

export interface Namespace extends KubeObject {
  status?: { phase?: string };
}
export const Namespaces = defineResource<Namespace>({
  group: '',
  version: 'v1',
  kind: 'Namespace',
  plural: 'namespaces',
  namespaced: false,
});

export interface Pod extends KubeObject {
  spec: {
    nodeName?: string;
    containers: { name: string; image: string; [k: string]: unknown }[];
    hostNetwork?: boolean;
    [k: string]: unknown;
  };
  status?: { phase?: string; podIP?: string; podIPs?: { ip: string }[]; [k: string]: unknown };
}
export const Pods = defineResource<Pod>({ group: '', version: 'v1', kind: 'Pod', plural: 'pods', namespaced: true });

export interface Node extends KubeObject {
  spec?: { podCIDR?: string; podCIDRs?: string[]; providerID?: string; [k: string]: unknown };
  status?: { addresses?: { type: string; address: string }[]; [k: string]: unknown };
}
export const Nodes = defineResource<Node>({ group: '', version: 'v1', kind: 'Node', plural: 'nodes', namespaced: false });

export interface Lease extends KubeObject {
  spec?: {
    holderIdentity?: string | null;
    leaseDurationSeconds?: number;
    acquireTime?: string | null;
    renewTime?: string | null;
    leaseTransitions?: number;
  };
}
export const Leases = defineResource<Lease>({
  group: 'coordination.k8s.io',
  version: 'v1',
  kind: 'Lease',
  plural: 'leases',
  namespaced: true,
});

/** autoscaling/v1 Scale, the scale subresource's body. */
export interface Scale extends KubeObject {
  spec?: { replicas?: number };
  status?: { replicas: number; selector?: string };
}
