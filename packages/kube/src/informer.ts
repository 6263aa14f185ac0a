/**
 * Informer: list, then watch from the list's resourceVersion, keeping a local indexed cache current and
 * calling handlers on every change (client-go's reflector + indexer + shared informer, in one class).
 *
 * - A watch that ends (server timeout) or breaks (connection dropped) is reopened from the last
 *   resourceVersion seen (an event's or a bookmark's): nothing missed, nothing repeated.
 * - Bookmarks (allowWatchBookmarks) move that resourceVersion forward while nothing changes, so a resume
 *   after a quiet period does not start from a version the server has already compacted.
 * - When the version is gone anyway (410 Gone / Expired), it lists again and reconciles the cache with the
 *   list: handlers see add/update for what changed and delete (finalStateUnknown) for what vanished.
 */
import { Indexer, type IndexFunc } from './cache';
import type { ResourceClient } from './client';
import { AbortedError, KubeTimeoutError, isGone } from './errors';
import { traceLogger, type Logger } from './log';
import type { KubeMetrics } from './metrics';
import { objectKey, type KubeObject } from './resource';
import { ExponentialBackoff, sleep } from './retry';
import type { WatchEvent } from './watch';

export interface DeleteInfo {
  /** True when the deletion was inferred from a re-list (the last state seen may not be the final one). */
  finalStateUnknown: boolean;
}

export interface InformerHandlers<T extends KubeObject> {
  add?(obj: T): void;
  update?(oldObj: T, newObj: T): void;
  delete?(obj: T, info: DeleteInfo): void;
}

export interface InformerOptions<T extends KubeObject> {
  /** Namespace to watch; default the client's; none = every namespace (or a cluster-scoped resource). */
  namespace?: string;
  labelSelector?: string;
  fieldSelector?: string;
  indexers?: Record<string, IndexFunc<T>>;
  /** List page size. Default 500. */
  pageSize?: number;
  /** Server-side watch timeout per request; default random 300-600 s like client-go. */
  watchTimeoutSeconds?: number;
  /** Request bookmarks. Default true. */
  bookmarks?: boolean;
  /** Reconnect backoff after a broken watch or failed list. Default 200 ms doubling to 30 s. */
  backoff?: { initialMs?: number; maxMs?: number };
  metrics?: KubeMetrics;
  logger?: Logger;
  /** Label for metrics and logs. Default the resource's full name. */
  name?: string;
}

export interface InformerStats {
  /** Complete lists: the initial one plus re-lists. */
  lists: number;
  /** Re-lists caused by 410 Gone. */
  relistsOnGone: number;
  /** Watch requests opened, resumes included. */
  watches: number;
  /** Watches that broke (transport error) and were resumed. */
  watchErrors: number;
  bookmarks: number;
  /** ADDED/MODIFIED/DELETED events applied. */
  events: number;
}

export class Informer<T extends KubeObject> {
  readonly store: Indexer<T>;
  readonly stats: InformerStats = { lists: 0, relistsOnGone: 0, watches: 0, watchErrors: 0, bookmarks: 0, events: 0 };
  private readonly handlers = new Set<InformerHandlers<T>>();
  private readonly namespace: string | undefined;
  private readonly name: string;
  private readonly log: Logger;
  private rv = '';
  private synced = false;
  private needList = true;
  private running: Promise<void> | undefined;
  private stopCtl = new AbortController();
  private watchCtl: AbortController | undefined;
  private syncWaiters: (() => void)[] = [];

  constructor(
    readonly client: ResourceClient<T>,
    private readonly opts: InformerOptions<T> = {},
  ) {
    this.store = new Indexer<T>(opts.indexers ?? {});
    this.namespace = opts.namespace ?? client.namespace;
    this.name = opts.name ?? client.resource.fullName;
    this.log = opts.logger ?? traceLogger('kube.informer', { resource: this.name });
  }

  /** The last resourceVersion applied (event, bookmark or list). */
  get resourceVersion(): string {
    return this.rv;
  }

  hasSynced(): boolean {
    return this.synced;
  }

  /**
   * Adds handlers. Objects already in the cache are replayed to `add` at once, so a handler added late sees
   * the same world as one added before start. Returns a function removing them.
   */
  addHandlers(h: InformerHandlers<T>): () => void {
    this.handlers.add(h);
    if (this.synced && h.add) for (const o of this.store.list()) this.call(() => h.add!(o));
    return () => this.handlers.delete(h);
  }

  /** Starts the list/watch loop; resolves once the first list is in the cache. */
  async start(opts: { timeoutMs?: number } = {}): Promise<void> {
    if (!this.running) {
      this.stopCtl = new AbortController();
      this.running = this.run();
    }
    await this.waitForSync(opts.timeoutMs ?? 60_000);
  }

  async waitForSync(timeoutMs = 60_000): Promise<void> {
    if (this.synced) return;
    await new Promise<void>((resolve, reject) => {
      const t = setTimeout(() => reject(new KubeTimeoutError(`informer ${this.name}: sync`, timeoutMs)), timeoutMs);
      this.syncWaiters.push(() => {
        clearTimeout(t);
        resolve();
      });
    });
  }

  /** Stops watching; the cache keeps its content. */
  async stop(): Promise<void> {
    this.stopCtl.abort();
    this.watchCtl?.abort();
    await this.running?.catch(() => undefined);
    this.running = undefined;
  }

  /** Ends the current watch request as a broken connection would; the loop resumes from the last version. */
  restartWatch(): void {
    this.watchCtl?.abort();
  }

  private async run(): Promise<void> {
    const backoff = new ExponentialBackoff(this.opts.backoff?.initialMs ?? 200, this.opts.backoff?.maxMs ?? 30_000);
    const stop = this.stopCtl.signal;
    while (!stop.aborted) {
      try {
        if (this.needList) {
          await this.relist();
          backoff.reset();
        }
        await this.watchOnce();
        // The server ended the watch (its timeout): reopen at once from the last version.
      } catch (err) {
        if (stop.aborted) break;
        if (isGone(err)) {
          this.log.info('watch resourceVersion expired; re-listing', { resourceVersion: this.rv, error: err });
          this.stats.relistsOnGone++;
          this.needList = true;
          continue;
        }
        if (err instanceof AbortedError && !stop.aborted) {
          // restartWatch(): resume at once.
          continue;
        }
        this.stats.watchErrors++;
        const wait = backoff.next();
        this.log.warn(this.needList ? 'list failed; retrying' : 'watch broke; resuming', {
          resourceVersion: this.rv,
          retryInMs: Math.round(wait),
          error: err,
        });
        await sleep(wait, stop).catch(() => undefined);
      }
    }
  }

  private async watchOnce(): Promise<void> {
    this.watchCtl = new AbortController();
    const signal = AbortSignal.any([this.watchCtl.signal, this.stopCtl.signal]);
    const timeoutSeconds = this.opts.watchTimeoutSeconds ?? 300 + Math.floor(Math.random() * 300);
    this.stats.watches++;
    this.opts.metrics?.informerWatches.inc({ resource: this.name });
    this.log.debug('watch', { resourceVersion: this.rv, timeoutSeconds });
    const events = this.client.watch({
      namespace: this.namespace,
      resourceVersion: this.rv,
      allowWatchBookmarks: this.opts.bookmarks ?? true,
      labelSelector: this.opts.labelSelector,
      fieldSelector: this.opts.fieldSelector,
      timeoutSeconds,
      signal,
    });
    for await (const ev of events) this.apply(ev);
  }

  private apply(ev: WatchEvent<T>): void {
    const rv = ev.object?.metadata?.resourceVersion;
    if (ev.type === 'BOOKMARK') {
      if (rv) this.rv = rv;
      this.stats.bookmarks++;
      return;
    }
    const obj = ev.object;
    const key = objectKey(obj);
    this.stats.events++;
    this.opts.metrics?.informerEvents.inc({ resource: this.name, type: ev.type });
    if (ev.type === 'DELETED') {
      const old = this.store.delete(key);
      this.emitDelete(obj ?? old, false);
    } else {
      const old = this.store.upsert(obj);
      if (old) this.emitUpdate(old, obj);
      else this.emitAdd(obj);
    }
    if (rv) this.rv = rv;
    this.opts.metrics?.informerCacheSize.set({ resource: this.name }, this.store.size);
  }

  private async relist(): Promise<void> {
    const reason = this.stats.lists === 0 ? 'initial' : 'gone';
    const list = await this.client.listAll({
      namespace: this.namespace,
      labelSelector: this.opts.labelSelector,
      fieldSelector: this.opts.fieldSelector,
      pageSize: this.opts.pageSize ?? 500,
      signal: this.stopCtl.signal,
    });
    this.stats.lists++;
    this.opts.metrics?.informerLists.inc({ resource: this.name, reason });
    const seen = new Set<string>();
    for (const obj of list.items) {
      // List items carry no apiVersion/kind; fill them so cached objects look like watched ones.
      obj.apiVersion ??= this.client.resource.apiVersion;
      obj.kind ??= this.client.resource.kind;
      const key = objectKey(obj);
      seen.add(key);
      const old = this.store.get(key);
      if (old && old.metadata.resourceVersion === obj.metadata.resourceVersion) continue;
      this.store.upsert(obj);
      if (old) this.emitUpdate(old, obj);
      else this.emitAdd(obj);
    }
    for (const key of this.store.keys()) {
      if (!seen.has(key)) this.emitDelete(this.store.delete(key)!, true);
    }
    this.rv = list.metadata.resourceVersion ?? '';
    this.needList = false;
    this.opts.metrics?.informerCacheSize.set({ resource: this.name }, this.store.size);
    this.log.debug('listed', { reason, items: list.items.length, resourceVersion: this.rv });
    if (!this.synced) {
      this.synced = true;
      for (const w of this.syncWaiters.splice(0)) w();
    }
  }

  private emitAdd(obj: T): void {
    for (const h of this.handlers) if (h.add) this.call(() => h.add!(obj));
  }

  private emitUpdate(oldObj: T, newObj: T): void {
    for (const h of this.handlers) if (h.update) this.call(() => h.update!(oldObj, newObj));
  }

  private emitDelete(obj: T, finalStateUnknown: boolean): void {
    for (const h of this.handlers) if (h.delete) this.call(() => h.delete!(obj, { finalStateUnknown }));
  }

  private call(fn: () => void): void {
    try {
      fn();
    } catch (err) {
      this.log.error('informer handler threw', { error: err });
    }
  }
}
