/**
 * Finalizer and ownerReference helpers. Finalizer edits go through update-with-retry, so they never drop
 * another writer's change (a merge patch of metadata.finalizers would replace the whole list).
 */
import type { ResourceClient } from './client';
import { KubeConfigError, isNotFound } from './errors';
import type { KubeObject, OwnerReference } from './resource';

export const isBeingDeleted = (obj: KubeObject): boolean => Boolean(obj.metadata.deletionTimestamp);

export const hasFinalizer = (obj: KubeObject, finalizer: string): boolean => (obj.metadata.finalizers ?? []).includes(finalizer);

/** Adds the finalizer if missing (no write when present). Returns the stored object. */
export async function addFinalizer<T extends KubeObject>(client: ResourceClient<T>, obj: T, finalizer: string): Promise<T> {
  if (hasFinalizer(obj, finalizer)) return obj;
  return client.updateWithRetry(
    nameOf(obj),
    (cur) => {
      if (hasFinalizer(cur, finalizer)) return false;
      if (isBeingDeleted(cur))
        throw new KubeConfigError(`${client.resource.kind} ${nameOf(cur)}: being deleted, cannot add finalizer ${finalizer}`);
      cur.metadata.finalizers = [...(cur.metadata.finalizers ?? []), finalizer];
      return cur;
    },
    { namespace: obj.metadata.namespace },
  );
}

/**
 * Removes the finalizer (no write when absent). Returns the stored object, or undefined when the removal let
 * the deletion complete (or the object was already gone).
 */
export async function removeFinalizer<T extends KubeObject>(client: ResourceClient<T>, obj: T, finalizer: string): Promise<T | undefined> {
  try {
    const res = await client.updateWithRetry(
      nameOf(obj),
      (cur) => {
        if (!hasFinalizer(cur, finalizer)) return false;
        cur.metadata.finalizers = (cur.metadata.finalizers ?? []).filter((f) => f !== finalizer);
        return cur;
      },
      { namespace: obj.metadata.namespace },
    );
    return res;
  } catch (err) {
    if (isNotFound(err)) return undefined;
    throw err;
  }
}

/** An ownerReference pointing at owner (which must come from the server: it needs uid, apiVersion and kind). */
export function ownerReference(owner: KubeObject, opts: { controller?: boolean; blockOwnerDeletion?: boolean } = {}): OwnerReference {
  const { apiVersion, kind } = owner;
  const { name, uid } = owner.metadata;
  if (!apiVersion || !kind || !name || !uid) {
    throw new KubeConfigError(
      `ownerReference: owner needs apiVersion, kind, metadata.name and metadata.uid (got ${JSON.stringify({ apiVersion, kind, name, uid })})`,
    );
  }
  const ref: OwnerReference = { apiVersion, kind, name, uid };
  if (opts.controller !== undefined) ref.controller = opts.controller;
  if (opts.blockOwnerDeletion !== undefined) ref.blockOwnerDeletion = opts.blockOwnerDeletion;
  return ref;
}

/** The controller ownerReference of obj, if any. */
export const controllerOf = (obj: KubeObject): OwnerReference | undefined => obj.metadata.ownerReferences?.find((r) => r.controller);

export const isOwnedBy = (obj: KubeObject, owner: KubeObject): boolean =>
  (obj.metadata.ownerReferences ?? []).some((r) => r.uid === owner.metadata.uid);

/**
 * Makes owner the controller of obj (controller=true, blockOwnerDeletion=true), in place; like
 * controller-runtime's SetControllerReference it refuses when another object already controls obj, and an
 * owner that is namespaced must live in obj's namespace.
 */
export function setControllerReference<T extends KubeObject>(owner: KubeObject, obj: T): T {
  const ref = ownerReference(owner, { controller: true, blockOwnerDeletion: true });
  const existing = controllerOf(obj);
  if (existing && existing.uid !== ref.uid) {
    throw new KubeConfigError(`${obj.kind ?? 'object'} ${obj.metadata.name}: already controlled by ${existing.kind} ${existing.name}`);
  }
  if (owner.metadata.namespace && obj.metadata.namespace && owner.metadata.namespace !== obj.metadata.namespace) {
    throw new KubeConfigError(
      `ownerReference: cross-namespace owner ${owner.metadata.namespace}/${owner.metadata.name} for ${obj.metadata.namespace}/${obj.metadata.name}`,
    );
  }
  return setOwnerReference(obj, ref);
}

/** Adds or replaces (by uid) an ownerReference, in place. */
export function setOwnerReference<T extends KubeObject>(obj: T, ref: OwnerReference): T {
  const refs = (obj.metadata.ownerReferences ?? []).filter((r) => r.uid !== ref.uid);
  obj.metadata.ownerReferences = [...refs, ref];
  return obj;
}

function nameOf(obj: KubeObject): string {
  if (!obj.metadata.name) throw new KubeConfigError('object has no metadata.name');
  return obj.metadata.name;
}
