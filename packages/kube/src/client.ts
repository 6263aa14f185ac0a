/**
 * A typed client for one resource (built-in or custom): CRUD, patch in all four content types, the status
 * and scale subresources, watch, and update-with-retry on 409 Conflict.
 */
import { KubeConfigError, isNotFound } from './errors';
import { resourcePath, type KubeList, type KubeObject, type Resource, type Scale } from './resource';
import { CONFLICT_RETRY, retryOnConflict, type Backoff } from './retry';
import type { KubeTransport, Query } from './transport';
import { watchEvents, type WatchEvent, type WatchOptions } from './watch';

/** merge: RFC 7386; json: RFC 6902 operations; strategic: built-in types only; apply: server-side apply. */
export type PatchType = 'merge' | 'json' | 'strategic' | 'apply';

const PATCH_CONTENT_TYPE: Record<PatchType, string> = {
  merge: 'application/merge-patch+json',
  json: 'application/json-patch+json',
  strategic: 'application/strategic-merge-patch+json',
  apply: 'application/apply-patch+yaml',
};

export interface JsonPatchOp {
  op: 'add' | 'remove' | 'replace' | 'move' | 'copy' | 'test';
  path: string;
  value?: unknown;
  from?: string;
}

export interface WriteOptions {
  /** Server-side dry run: validated and admitted, not stored. */
  dryRun?: boolean;
  fieldManager?: string;
  /** Unknown or duplicate fields: Strict fails the request, Warn (server default) only warns. */
  fieldValidation?: 'Ignore' | 'Warn' | 'Strict';
  signal?: AbortSignal;
}

export interface PatchOptions extends WriteOptions {
  /** Server-side apply only: take ownership of conflicting fields. */
  force?: boolean;
}

export interface ListOptions {
  labelSelector?: string;
  fieldSelector?: string;
  /** Page size; continue with `continue`. */
  limit?: number;
  continue?: string;
  resourceVersion?: string;
  resourceVersionMatch?: 'Exact' | 'NotOlderThan';
  signal?: AbortSignal;
}

export interface DeleteOptions {
  /** Foreground waits for dependents, Background (default for most) lets the garbage collector remove them, Orphan keeps them. */
  propagationPolicy?: 'Foreground' | 'Background' | 'Orphan';
  gracePeriodSeconds?: number;
  preconditions?: { uid?: string; resourceVersion?: string };
  dryRun?: boolean;
  signal?: AbortSignal;
}

export interface UpdateWithRetryOptions {
  backoff?: Backoff;
  /** Write the status subresource instead of the main resource. */
  subresource?: 'status';
  signal?: AbortSignal;
}

/** What a mutate function returns: the object to write, or undefined to write the (mutated) argument, or false to skip. */
export type Mutation<T> = T | undefined | false | void;

export class ResourceClient<T extends KubeObject> {
  /** Namespace used when an object or call names none. */
  readonly namespace: string | undefined;

  constructor(
    readonly transport: KubeTransport,
    readonly resource: Resource<T>,
    opts: { namespace?: string } = {},
  ) {
    this.namespace = resource.namespaced ? opts.namespace : undefined;
  }

  /** The same client bound to another namespace. */
  inNamespace(namespace: string): ResourceClient<T> {
    return new ResourceClient(this.transport, this.resource, { namespace });
  }

  /** Path of the collection (namespace from the argument, else the client's), or of one object. */
  path(opts: { namespace?: string; name?: string; subresource?: string; allNamespaces?: boolean } = {}): string {
    const namespace = opts.allNamespaces ? undefined : this.ns(opts.namespace, opts.name === undefined);
    return resourcePath(this.resource, { namespace, name: opts.name, subresource: opts.subresource });
  }

  async get(name: string, opts: { namespace?: string; signal?: AbortSignal } = {}): Promise<T> {
    return this.transport.request<T>('GET', this.path({ namespace: opts.namespace, name }), { signal: opts.signal });
  }

  /** Like get, but undefined when the object does not exist. */
  async find(name: string, opts: { namespace?: string; signal?: AbortSignal } = {}): Promise<T | undefined> {
    try {
      return await this.get(name, opts);
    } catch (err) {
      if (isNotFound(err)) return undefined;
      throw err;
    }
  }

  /** One page (or all, without limit) of the collection; in the client's namespace, or every namespace when it has none. */
  async list(opts: ListOptions & { namespace?: string } = {}): Promise<KubeList<T>> {
    const query: Query = {
      labelSelector: opts.labelSelector,
      fieldSelector: opts.fieldSelector,
      limit: opts.limit,
      continue: opts.continue,
      resourceVersion: opts.resourceVersion,
      resourceVersionMatch: opts.resourceVersionMatch,
    };
    const path = resourcePath(this.resource, { namespace: opts.namespace ?? this.namespace });
    return this.transport.request<KubeList<T>>('GET', path, { query, signal: opts.signal });
  }

  /** Every page of the collection, followed through `continue`, as one list with the first page's resourceVersion. */
  async listAll(opts: Omit<ListOptions, 'continue'> & { namespace?: string; pageSize?: number } = {}): Promise<KubeList<T>> {
    const items: T[] = [];
    let first: KubeList<T> | undefined;
    let cont: string | undefined;
    do {
      const page = await this.list({ ...opts, limit: opts.pageSize ?? opts.limit ?? 500, continue: cont });
      first ??= page;
      items.push(...page.items);
      cont = page.metadata.continue || undefined;
    } while (cont);
    return { ...first!, metadata: { resourceVersion: first!.metadata.resourceVersion }, items };
  }

  async create(obj: T, opts: WriteOptions = {}): Promise<T> {
    const body = this.stamp(obj);
    if (this.resource.namespaced && !body.metadata.namespace) {
      throw new KubeConfigError(`${this.resource.kind} is namespaced: give a namespace (client or metadata.namespace)`);
    }
    const path = resourcePath(this.resource, { namespace: body.metadata.namespace });
    return this.transport.request<T>('POST', path, { body, query: writeQuery(opts), signal: opts.signal });
  }

  /** PUT: replaces the object; fails with 409 Conflict when metadata.resourceVersion is stale. */
  async update(obj: T, opts: WriteOptions = {}): Promise<T> {
    return this.transport.request<T>('PUT', this.path({ namespace: obj.metadata.namespace, name: this.nameOf(obj) }), {
      body: this.stamp(obj),
      query: writeQuery(opts),
      signal: opts.signal,
    });
  }

  async patch(name: string, patch: unknown, type: PatchType = 'merge', opts: PatchOptions & { namespace?: string } = {}): Promise<T> {
    return this.patchPath(this.path({ namespace: opts.namespace, name }), patch, type, opts);
  }

  /** Deletes; returns the object when it still exists afterwards (finalizers pending, foreground deletion), else undefined. */
  async delete(name: string, opts: DeleteOptions & { namespace?: string; ignoreNotFound?: boolean } = {}): Promise<T | undefined> {
    const body = {
      apiVersion: 'v1',
      kind: 'DeleteOptions',
      propagationPolicy: opts.propagationPolicy,
      gracePeriodSeconds: opts.gracePeriodSeconds,
      preconditions: opts.preconditions,
      dryRun: opts.dryRun ? ['All'] : undefined,
    };
    try {
      const res = await this.transport.request<KubeObject & { status?: unknown }>(
        'DELETE',
        this.path({ namespace: opts.namespace, name }),
        { body, signal: opts.signal },
      );
      if (res && res.kind !== 'Status' && res.metadata?.deletionTimestamp) return res as T;
      return undefined;
    } catch (err) {
      if (opts.ignoreNotFound && isNotFound(err)) return undefined;
      throw err;
    }
  }

  /** Deletes every object matching the selectors in the client's namespace (or a cluster-scoped collection). */
  async deleteCollection(
    opts: {
      namespace?: string;
      labelSelector?: string;
      fieldSelector?: string;
      propagationPolicy?: DeleteOptions['propagationPolicy'];
    } = {},
  ): Promise<void> {
    await this.transport.request('DELETE', resourcePath(this.resource, { namespace: opts.namespace ?? this.namespace }), {
      query: { labelSelector: opts.labelSelector, fieldSelector: opts.fieldSelector, propagationPolicy: opts.propagationPolicy },
    });
  }

  // status subresource

  async getStatus(name: string, opts: { namespace?: string } = {}): Promise<T> {
    return this.transport.request<T>('GET', this.path({ namespace: opts.namespace, name, subresource: 'status' }));
  }

  /** PUT .../status: only status is taken from obj; metadata.resourceVersion guards it like update. */
  async updateStatus(obj: T, opts: WriteOptions = {}): Promise<T> {
    return this.transport.request<T>(
      'PUT',
      this.path({ namespace: obj.metadata.namespace, name: this.nameOf(obj), subresource: 'status' }),
      {
        body: this.stamp(obj),
        query: writeQuery(opts),
        signal: opts.signal,
      },
    );
  }

  async patchStatus(name: string, patch: unknown, type: PatchType = 'merge', opts: PatchOptions & { namespace?: string } = {}): Promise<T> {
    return this.patchPath(this.path({ namespace: opts.namespace, name, subresource: 'status' }), patch, type, opts);
  }

  // scale subresource (autoscaling/v1 Scale)

  async getScale(name: string, opts: { namespace?: string } = {}): Promise<Scale> {
    return this.transport.request<Scale>('GET', this.path({ namespace: opts.namespace, name, subresource: 'scale' }));
  }

  async updateScale(scale: Scale, opts: WriteOptions = {}): Promise<Scale> {
    const name = scale.metadata.name;
    if (!name) throw new KubeConfigError(`${this.resource.kind} scale: metadata.name is required`);
    return this.transport.request<Scale>('PUT', this.path({ namespace: scale.metadata.namespace, name, subresource: 'scale' }), {
      body: { apiVersion: 'autoscaling/v1', kind: 'Scale', ...scale },
      query: writeQuery(opts),
      signal: opts.signal,
    });
  }

  /** Sets spec.replicas through the scale subresource (a merge patch: no read needed). */
  async scale(name: string, replicas: number, opts: WriteOptions & { namespace?: string } = {}): Promise<Scale> {
    return this.transport.request<Scale>('PATCH', this.path({ namespace: opts.namespace, name, subresource: 'scale' }), {
      body: { spec: { replicas } },
      contentType: PATCH_CONTENT_TYPE.merge,
      query: writeQuery(opts),
      signal: opts.signal,
    });
  }

  // watch

  /** Raw watch of the collection (client's namespace, or all namespaces when it has none). */
  watch(opts: WatchOptions & { namespace?: string } = {}): AsyncGenerator<WatchEvent<T>> {
    return watchEvents<T>(this.transport, resourcePath(this.resource, { namespace: opts.namespace ?? this.namespace }), opts);
  }

  /**
   * Read-modify-write with optimistic concurrency: gets the object, lets mutate change it, writes it with the
   * resourceVersion it read; on 409 Conflict reads again and re-applies mutate (client-go's RetryOnConflict).
   * mutate may return false to skip the write (nothing to change). Returns the stored object.
   */
  async updateWithRetry(
    name: string,
    mutate: (obj: T, attempt: number) => Mutation<T> | Promise<Mutation<T>>,
    opts: UpdateWithRetryOptions & { namespace?: string } = {},
  ): Promise<T> {
    return retryOnConflict(
      async (attempt) => {
        const current = await this.get(name, { namespace: opts.namespace, signal: opts.signal });
        const result = await mutate(current, attempt);
        if (result === false) return current;
        const next = result ?? current;
        if (opts.namespace && this.resource.namespaced) next.metadata.namespace ??= opts.namespace;
        return opts.subresource === 'status'
          ? this.updateStatus(next, { signal: opts.signal })
          : this.update(next, { signal: opts.signal });
      },
      opts.backoff ?? CONFLICT_RETRY,
      opts.signal,
    );
  }

  private async patchPath(path: string, patch: unknown, type: PatchType, opts: PatchOptions): Promise<T> {
    if (type === 'apply' && !opts.fieldManager) throw new KubeConfigError(`${this.resource.kind} apply patch: fieldManager is required`);
    const query: Query = { ...writeQuery(opts), force: type === 'apply' && opts.force ? true : undefined };
    return this.transport.request<T>('PATCH', path, { body: patch, contentType: PATCH_CONTENT_TYPE[type], query, signal: opts.signal });
  }

  private ns(given: string | undefined, collection: boolean): string | undefined {
    if (!this.resource.namespaced) return undefined;
    const ns = given ?? this.namespace;
    if (!ns && !collection) throw new KubeConfigError(`${this.resource.kind} is namespaced: give a namespace (client or call)`);
    return ns;
  }

  private nameOf(obj: KubeObject): string {
    const name = obj.metadata?.name;
    if (!name) throw new KubeConfigError(`${this.resource.kind}: metadata.name is required`);
    return name;
  }

  /** Fills apiVersion/kind (and the client's namespace) so callers can write plain objects. */
  private stamp(obj: T): T {
    const metadata = { ...obj.metadata };
    if (this.resource.namespaced && !metadata.namespace && this.namespace) metadata.namespace = this.namespace;
    return { ...obj, apiVersion: this.resource.apiVersion, kind: this.resource.kind, metadata };
  }
}

function writeQuery(opts: WriteOptions): Query {
  return { dryRun: opts.dryRun ? 'All' : undefined, fieldManager: opts.fieldManager, fieldValidation: opts.fieldValidation };
}

/** Shorthand: a typed client for a resource. */
export function clientFor<T extends KubeObject>(
  transport: KubeTransport,
  resource: Resource<T>,
  opts: { namespace?: string } = {},
): ResourceClient<T> {
  return new ResourceClient(transport, resource, opts);
}

/** Watch events re-exported for callers that only import the client. */
export type { WatchEvent };
