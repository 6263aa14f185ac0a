/**
 * Controller runtime: informers feed keys into a rate-limited work queue; workers call a reconcile function
 * per key. A key is never reconciled by two workers at once; a failed reconcile is retried with the
 * per-key exponential backoff; a successful one clears the key's failures. Reconcile functions are
 * level-based: they read the current state (from the cache or the API) for the key, not the event.
 */
import type { Informer } from './informer';
import { traceLogger, type Logger } from './log';
import type { KubeMetrics } from './metrics';
import { objectKey, splitKey, type KubeObject } from './resource';
import { WorkQueue, type RateLimiter } from './workqueue';

export interface ReconcileResult {
  /** Reconcile again after this delay (polling an external system), without counting a failure. */
  requeueAfterMs?: number;
  /** Reconcile again through the rate limiter (counts as a retry). */
  requeue?: boolean;
}

export interface ReconcileRequest {
  key: string;
  namespace?: string;
  name: string;
  /** Failures so far for this key (0 on a first attempt). */
  retries: number;
  /** Aborted when the controller stops. */
  signal: AbortSignal;
}

export type Reconciler = (req: ReconcileRequest) => Promise<ReconcileResult | void>;

export interface ControllerOptions {
  name: string;
  reconcile: Reconciler;
  /** Concurrent workers. Default 1. */
  workers?: number;
  rateLimiter?: RateLimiter;
  /** Stop retrying a key after this many failures (it is dropped and logged). Default: retry forever. */
  maxRetries?: number;
  metrics?: KubeMetrics;
  logger?: Logger;
}

/** Maps an object event to the keys to reconcile (default: the object's own key). */
export type KeyMapper<T extends KubeObject> = (obj: T) => string[];

/** Keys of the owners of `kind` (controller references by default): reconcile the owner when a dependent changes. */
export function ownerKeyMapper<T extends KubeObject>(
  ownerKind: string,
  opts: { controllerOnly?: boolean; ownerNamespaced?: boolean } = {},
): KeyMapper<T> {
  return (obj) =>
    (obj.metadata.ownerReferences ?? [])
      .filter((r) => r.kind === ownerKind && (opts.controllerOnly === false || r.controller))
      .map((r) => ((opts.ownerNamespaced ?? true) && obj.metadata.namespace ? `${obj.metadata.namespace}/${r.name}` : r.name));
}

export class Controller {
  readonly queue: WorkQueue;
  readonly name: string;
  private readonly informers: Informer<KubeObject>[] = [];
  private readonly log: Logger;
  private workers: Promise<void>[] = [];
  private readonly stopCtl = new AbortController();

  constructor(private readonly opts: ControllerOptions) {
    this.name = opts.name;
    this.queue = new WorkQueue({ name: opts.name, rateLimiter: opts.rateLimiter, metrics: opts.metrics });
    this.log = opts.logger ?? traceLogger('kube.controller', { controller: opts.name });
  }

  /** Enqueues keys on every add/update/delete the informer sees. Call before start(). */
  watch<T extends KubeObject>(informer: Informer<T>, mapKeys: KeyMapper<T> = (o) => [objectKey(o)]): this {
    this.informers.push(informer as unknown as Informer<KubeObject>);
    const enqueue = (o: T): void => {
      for (const k of mapKeys(o)) this.queue.add(k);
    };
    informer.addHandlers({
      add: enqueue,
      update: (oldObj, newObj) => {
        // Resync-free informers only call update on a real change; still skip identical versions.
        if (oldObj.metadata.resourceVersion !== newObj.metadata.resourceVersion) enqueue(newObj);
      },
      delete: enqueue,
    });
    return this;
  }

  enqueue(key: string): void {
    this.queue.add(key);
  }

  /** Starts the informers (waiting for their caches) and the workers. */
  async start(opts: { syncTimeoutMs?: number } = {}): Promise<void> {
    await Promise.all(this.informers.map((i) => i.start({ timeoutMs: opts.syncTimeoutMs })));
    const n = this.opts.workers ?? 1;
    for (let i = 0; i < n; i++) this.workers.push(this.work());
    this.log.info('started', { workers: n });
  }

  /** Stops workers (waiting for running reconciles) and the informers this controller watches. */
  async stop(): Promise<void> {
    this.stopCtl.abort();
    await this.queue.shutDown({ drain: true });
    await Promise.all(this.workers);
    await Promise.all(this.informers.map((i) => i.stop()));
    this.workers = [];
  }

  private async work(): Promise<void> {
    for (;;) {
      const key = await this.queue.get();
      if (key === undefined) return;
      await this.processKey(key);
    }
  }

  private async processKey(key: string): Promise<void> {
    const m = this.opts.metrics;
    const end = m?.reconcileTime.startTimer({ controller: this.name });
    const { namespace, name } = splitKey(key);
    try {
      const res = await this.opts.reconcile({ key, namespace, name, retries: this.queue.retries(key), signal: this.stopCtl.signal });
      if (res?.requeue) {
        m?.reconcileTotal.inc({ controller: this.name, result: 'requeue' });
        this.queue.addRateLimited(key);
      } else if (res?.requeueAfterMs !== undefined) {
        m?.reconcileTotal.inc({ controller: this.name, result: 'requeue_after' });
        this.queue.forget(key);
        this.queue.addAfter(key, res.requeueAfterMs);
      } else {
        m?.reconcileTotal.inc({ controller: this.name, result: 'success' });
        this.queue.forget(key);
      }
    } catch (err) {
      m?.reconcileTotal.inc({ controller: this.name, result: 'error' });
      m?.reconcileErrors.inc({ controller: this.name });
      const retries = this.queue.retries(key);
      if (this.opts.maxRetries !== undefined && retries >= this.opts.maxRetries) {
        this.log.error('reconcile failed; dropping key after max retries', { key, retries, error: err });
        this.queue.forget(key);
      } else {
        this.log.warn('reconcile failed; will retry', { key, retries, error: err });
        if (!this.stopCtl.signal.aborted) this.queue.addRateLimited(key);
      }
    } finally {
      end?.();
      this.queue.done(key);
    }
  }
}
