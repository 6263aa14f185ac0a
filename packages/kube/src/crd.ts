/**
 * CustomResourceDefinition helpers: build an apiextensions.k8s.io/v1 manifest from a resource definition and
 * a structural schema (validation rules in CEL x-kubernetes-validations rather than webhooks), read manifests
 * from YAML, derive the resource definition back from a manifest, and install CRDs (create or update, then
 * wait until the API server reports them Established).
 */
import { dump, loadAll } from 'js-yaml';
import { ResourceClient } from './client';
import { KubeConfigError, KubeTimeoutError, isAlreadyExists, isNotFound } from './errors';
import { defineResource, type KubeObject, type Resource, type ResourceDefinition } from './resource';
import { retryOnConflict, sleep } from './retry';
import type { KubeTransport } from './transport';

/** An OpenAPI v3 schema as CRDs take it (structural: every field typed), with Kubernetes extensions. */
export interface JSONSchemaProps {
  type?: 'object' | 'array' | 'string' | 'integer' | 'number' | 'boolean';
  description?: string;
  properties?: Record<string, JSONSchemaProps>;
  required?: string[];
  items?: JSONSchemaProps;
  additionalProperties?: JSONSchemaProps | boolean;
  enum?: unknown[];
  format?: string;
  pattern?: string;
  minimum?: number;
  maximum?: number;
  minLength?: number;
  maxLength?: number;
  minItems?: number;
  maxItems?: number;
  maxProperties?: number;
  default?: unknown;
  nullable?: boolean;
  'x-kubernetes-validations'?: ValidationRule[];
  'x-kubernetes-list-type'?: 'atomic' | 'set' | 'map';
  'x-kubernetes-list-map-keys'?: string[];
  'x-kubernetes-map-type'?: 'atomic' | 'granular';
  'x-kubernetes-preserve-unknown-fields'?: boolean;
  'x-kubernetes-int-or-string'?: boolean;
  'x-kubernetes-embedded-resource'?: boolean;
}

/** A CEL rule: `self` is the value, `oldSelf` the previous one (transition rules run on update only). */
export interface ValidationRule {
  rule: string;
  message?: string;
  messageExpression?: string;
  reason?: 'FieldValueInvalid' | 'FieldValueForbidden' | 'FieldValueRequired' | 'FieldValueDuplicate';
  fieldPath?: string;
  optionalOldSelf?: boolean;
}

export interface CrdVersion {
  name: string;
  served: boolean;
  storage: boolean;
  schema?: { openAPIV3Schema: JSONSchemaProps };
  subresources?: {
    status?: Record<string, never>;
    scale?: { specReplicasPath: string; statusReplicasPath: string; labelSelectorPath?: string };
  };
  additionalPrinterColumns?: { name: string; type: string; jsonPath: string; description?: string; priority?: number; format?: string }[];
  selectableFields?: { jsonPath: string }[];
  deprecated?: boolean;
}

export interface CustomResourceDefinition extends KubeObject {
  spec: {
    group: string;
    names: { kind: string; listKind?: string; plural: string; singular?: string; shortNames?: string[]; categories?: string[] };
    scope: 'Namespaced' | 'Cluster';
    versions: CrdVersion[];
    preserveUnknownFields?: boolean;
  };
  status?: {
    conditions?: { type: string; status: string; reason?: string; message?: string }[];
    acceptedNames?: { kind: string; plural: string };
    storedVersions?: string[];
  };
}

export const CustomResourceDefinitions = defineResource<CustomResourceDefinition>({
  group: 'apiextensions.k8s.io',
  version: 'v1',
  kind: 'CustomResourceDefinition',
  plural: 'customresourcedefinitions',
  namespaced: false,
});

export interface CrdOptions {
  /** The schema of the whole object (apiVersion/kind/metadata are added when missing). */
  schema: JSONSchemaProps;
  /** Enable the status subresource (spec and status written separately). Default true. */
  status?: boolean;
  /** Enable the scale subresource. */
  scale?: { specReplicasPath: string; statusReplicasPath: string; labelSelectorPath?: string };
  printerColumns?: CrdVersion['additionalPrinterColumns'];
  /** Fields usable in field selectors (Kubernetes >= 1.31). */
  selectableFields?: string[];
}

/** The apiextensions.k8s.io/v1 manifest for a resource definition (one served, stored version). */
export function crdManifest(res: ResourceDefinition, opts: CrdOptions): CustomResourceDefinition {
  if (!res.group) throw new KubeConfigError(`crd: ${res.kind} has no API group (built-in resources have no CRD)`);
  const def = defineResource(res);
  const schema: JSONSchemaProps = {
    ...opts.schema,
    type: 'object',
    properties: {
      apiVersion: { type: 'string' },
      kind: { type: 'string' },
      metadata: { type: 'object' },
      ...opts.schema.properties,
    },
  };
  const version: CrdVersion = { name: def.version, served: true, storage: true, schema: { openAPIV3Schema: schema } };
  if ((opts.status ?? true) || opts.scale) {
    version.subresources = {};
    if (opts.status ?? true) version.subresources.status = {};
    if (opts.scale) version.subresources.scale = opts.scale;
  }
  if (opts.printerColumns) version.additionalPrinterColumns = opts.printerColumns;
  if (opts.selectableFields) version.selectableFields = opts.selectableFields.map((jsonPath) => ({ jsonPath }));
  const names: CustomResourceDefinition['spec']['names'] = {
    kind: def.kind,
    listKind: def.listKind,
    plural: def.plural,
    singular: def.singular,
  };
  if (def.shortNames.length) names.shortNames = def.shortNames;
  if (def.categories.length) names.categories = def.categories;
  return {
    apiVersion: 'apiextensions.k8s.io/v1',
    kind: 'CustomResourceDefinition',
    metadata: { name: def.fullName },
    spec: { group: def.group, names, scope: def.namespaced ? 'Namespaced' : 'Cluster', versions: [version] },
  };
}

/** The resource definition a CRD manifest declares (its storage version unless one is named). */
export function resourceFromCrd<T extends KubeObject>(crd: CustomResourceDefinition, version?: string): Resource<T> {
  const v = version ?? crd.spec.versions.find((x) => x.storage)?.name ?? crd.spec.versions[0]?.name;
  if (!v || !crd.spec.versions.some((x) => x.name === v)) {
    throw new KubeConfigError(
      `crd ${crd.metadata.name}: no version ${JSON.stringify(version)} (has ${crd.spec.versions.map((x) => x.name).join(', ')})`,
    );
  }
  const n = crd.spec.names;
  return defineResource<T>({
    group: crd.spec.group,
    version: v,
    kind: n.kind,
    plural: n.plural,
    singular: n.singular,
    listKind: n.listKind,
    namespaced: crd.spec.scope === 'Namespaced',
    shortNames: n.shortNames,
    categories: n.categories,
  });
}

/** Every document of a (multi-document) YAML text, empty documents skipped. */
export function parseManifests(text: string): KubeObject[] {
  return (loadAll(text) as unknown[]).filter((d): d is KubeObject => d !== null && typeof d === 'object');
}

/** The CRDs among some manifests. */
export function crdsIn(docs: KubeObject[]): CustomResourceDefinition[] {
  return docs.filter(
    (d): d is CustomResourceDefinition => d.apiVersion === 'apiextensions.k8s.io/v1' && d.kind === 'CustomResourceDefinition',
  );
}

/** YAML text of manifests (multi-document). */
export function toYaml(docs: KubeObject | KubeObject[]): string {
  return (Array.isArray(docs) ? docs : [docs]).map((d) => dump(d, { noRefs: true, lineWidth: 120 })).join('---\n');
}

/**
 * Creates or updates a CRD and waits until it is Established (its API is served). Returns the stored CRD.
 * An update keeps the server's resourceVersion (optimistic concurrency, retried on conflict).
 */
export async function installCrd(
  transport: KubeTransport,
  crd: CustomResourceDefinition,
  opts: { timeoutMs?: number } = {},
): Promise<CustomResourceDefinition> {
  const client = new ResourceClient(transport, CustomResourceDefinitions);
  const name = crd.metadata.name!;
  try {
    await client.create(crd);
  } catch (err) {
    if (!isAlreadyExists(err)) throw err;
    await retryOnConflict(async () => {
      const cur = await client.get(name);
      return client.update({ ...crd, metadata: { ...crd.metadata, resourceVersion: cur.metadata.resourceVersion } });
    });
  }
  return waitForCrd(transport, name, opts.timeoutMs ?? 30_000);
}

/** Waits until the named CRD has Established=True and NamesAccepted=True. */
export async function waitForCrd(transport: KubeTransport, name: string, timeoutMs = 30_000): Promise<CustomResourceDefinition> {
  const client = new ResourceClient(transport, CustomResourceDefinitions);
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const cur = await client.find(name);
    const cond = (t: string): boolean => cur?.status?.conditions?.some((c) => c.type === t && c.status === 'True') ?? false;
    if (cur && cond('Established') && cond('NamesAccepted')) return cur;
    if (Date.now() > deadline) throw new KubeTimeoutError(`crd ${name}: established`, timeoutMs);
    await sleep(100);
  }
}

/** Deletes a CRD (and with it every object of its kind) and waits until it is gone. */
export async function uninstallCrd(transport: KubeTransport, name: string, timeoutMs = 30_000): Promise<void> {
  const client = new ResourceClient(transport, CustomResourceDefinitions);
  await client.delete(name, { ignoreNotFound: true });
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      await client.get(name);
    } catch (err) {
      if (isNotFound(err)) return;
      throw err;
    }
    if (Date.now() > deadline) throw new KubeTimeoutError(`crd ${name}: deletion`, timeoutMs);
    await sleep(100);
  }
}
