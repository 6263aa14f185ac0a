/**
 * The informer's local cache: objects by key ("namespace/name" or "name") plus secondary indexes, like
 * client-go's cache.Indexer. Index functions return the index values of an object (none, one or several);
 * byIndex(name, value) then answers "every pod on node n1" or "every pool labelled tier=gold" from memory.
 * Objects in the cache are shared: treat them as read-only (clone before mutating).
 */
import { objectKey, type KubeObject } from './resource';

export type IndexFunc<T> = (obj: T) => string[];

export class Indexer<T extends KubeObject> {
  private readonly items = new Map<string, T>();
  private readonly indexers = new Map<string, IndexFunc<T>>();
  /** index name -> index value -> keys */
  private readonly indices = new Map<string, Map<string, Set<string>>>();

  constructor(indexers: Record<string, IndexFunc<T>> = {}) {
    for (const [name, fn] of Object.entries(indexers)) this.addIndexer(name, fn);
  }

  /** Adds an index; existing objects are indexed at once. */
  addIndexer(name: string, fn: IndexFunc<T>): void {
    if (this.indexers.has(name)) throw new TypeError(`kube: cache: index ${JSON.stringify(name)} already exists`);
    this.indexers.set(name, fn);
    this.indices.set(name, new Map());
    for (const [key, obj] of this.items) this.indexOne(name, fn, key, obj);
  }

  get size(): number {
    return this.items.size;
  }

  get(key: string): T | undefined {
    return this.items.get(key);
  }

  /** The cached version of an object (by its namespace/name). */
  getFor(obj: KubeObject): T | undefined {
    return this.items.get(objectKey(obj));
  }

  keys(): string[] {
    return [...this.items.keys()];
  }

  list(): T[] {
    return [...this.items.values()];
  }

  /** Adds or replaces; returns the previous object. */
  upsert(obj: T): T | undefined {
    const key = objectKey(obj);
    const old = this.items.get(key);
    if (old) this.unindex(key, old);
    this.items.set(key, obj);
    for (const [name, fn] of this.indexers) this.indexOne(name, fn, key, obj);
    return old;
  }

  /** Removes by key; returns the removed object. */
  delete(key: string): T | undefined {
    const old = this.items.get(key);
    if (!old) return undefined;
    this.unindex(key, old);
    this.items.delete(key);
    return old;
  }

  /** Replaces everything (after a list). */
  replace(objs: T[]): void {
    this.items.clear();
    for (const idx of this.indices.values()) idx.clear();
    for (const o of objs) this.upsert(o);
  }

  /** Objects whose index `name` contains `value`. */
  byIndex(name: string, value: string): T[] {
    return this.indexKeys(name, value).map((k) => this.items.get(k)!);
  }

  indexKeys(name: string, value: string): string[] {
    const idx = this.indices.get(name);
    if (!idx) throw new TypeError(`kube: cache: no index ${JSON.stringify(name)} (have ${[...this.indexers.keys()].join(', ') || 'none'})`);
    return [...(idx.get(value) ?? [])].sort();
  }

  /** The values an index currently holds (e.g. every node name that has pods). */
  indexValues(name: string): string[] {
    return [...(this.indices.get(name)?.keys() ?? [])].sort();
  }

  private indexOne(name: string, fn: IndexFunc<T>, key: string, obj: T): void {
    const idx = this.indices.get(name)!;
    for (const v of new Set(fn(obj))) {
      let keys = idx.get(v);
      if (!keys) idx.set(v, (keys = new Set()));
      keys.add(key);
    }
  }

  private unindex(key: string, obj: T): void {
    for (const [name, fn] of this.indexers) {
      const idx = this.indices.get(name)!;
      for (const v of new Set(fn(obj))) {
        const keys = idx.get(v);
        keys?.delete(key);
        if (keys && keys.size === 0) idx.delete(v);
      }
    }
  }
}

/** Reads a dotted field path ("spec.nodeName", "metadata.namespace") from an object. */
export function fieldValue(obj: unknown, fieldPath: string): unknown {
  let cur: unknown = obj;
  for (const part of fieldPath.split('.')) {
    if (cur === null || typeof cur !== 'object') return undefined;
    cur = (cur as Record<string, unknown>)[part];
  }
  return cur;
}

/** Index by the value of one label (objects without the label are not indexed). */
export function byLabel<T extends KubeObject>(label: string): IndexFunc<T> {
  return (obj) => {
    const v = obj.metadata.labels?.[label];
    return v === undefined ? [] : [v];
  };
}

/** Index by a field such as "spec.nodeName"; arrays index each element; empty values are not indexed. */
export function byField<T extends KubeObject>(fieldPath: string): IndexFunc<T> {
  return (obj) => {
    const v = fieldValue(obj, fieldPath);
    const vals = Array.isArray(v) ? v : [v];
    return vals.filter((x) => x !== undefined && x !== null && x !== '').map(String);
  };
}

/** Index by namespace (client-go's NamespaceIndex). */
export function byNamespace<T extends KubeObject>(): IndexFunc<T> {
  return (obj) => (obj.metadata.namespace ? [obj.metadata.namespace] : []);
}

/** Index by the uid of each owner (find dependents of an owner from the cache). */
export function byOwnerUid<T extends KubeObject>(): IndexFunc<T> {
  return (obj) => (obj.metadata.ownerReferences ?? []).map((r) => r.uid);
}
