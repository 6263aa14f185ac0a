/**
 * A rate-limited work queue with client-go's semantics:
 * - dedup: a key waiting in the queue is queued once, however often it is added;
 * - a key being processed is never handed to a second worker; added meanwhile, it is queued again when the
 *   first worker calls done();
 * - addRateLimited(key) re-adds after a per-key exponential delay (base 5 ms doubling to 1000 s by default,
 *   client-go's ItemExponentialFailureRateLimiter), combined with an overall token bucket (10 qps, burst 100);
 *   forget(key) resets the key's failures after a success;
 * - addAfter(key, ms) keeps the earliest pending time per key.
 */
import type { KubeMetrics } from './metrics';

export interface RateLimiter {
  /** Delay before the key may be retried; counts a failure. */
  when(key: string): number;
  forget(key: string): void;
  retries(key: string): number;
}

/** Per-key exponential failure backoff: base * 2^failures, capped. */
export class ExponentialFailureRateLimiter implements RateLimiter {
  private readonly failures = new Map<string, number>();
  constructor(
    readonly baseMs = 5,
    readonly maxMs = 1_000_000,
  ) {}
  when(key: string): number {
    const n = this.failures.get(key) ?? 0;
    this.failures.set(key, n + 1);
    return Math.min(this.baseMs * 2 ** n, this.maxMs);
  }
  forget(key: string): void {
    this.failures.delete(key);
  }
  retries(key: string): number {
    return this.failures.get(key) ?? 0;
  }
}

/** Overall token bucket: qps tokens per second, up to burst. */
export class BucketRateLimiter implements RateLimiter {
  private tokens: number;
  private last = Date.now();
  constructor(
    readonly qps = 10,
    readonly burst = 100,
  ) {
    this.tokens = burst;
  }
  when(): number {
    const now = Date.now();
    this.tokens = Math.min(this.burst, this.tokens + ((now - this.last) / 1000) * this.qps);
    this.last = now;
    this.tokens -= 1;
    return this.tokens >= 0 ? 0 : (-this.tokens / this.qps) * 1000;
  }
  forget(): void {}
  retries(): number {
    return 0;
  }
}

/** The largest delay of several limiters (client-go's MaxOfRateLimiter). */
export class MaxOfRateLimiter implements RateLimiter {
  private readonly limiters: RateLimiter[];
  constructor(...limiters: RateLimiter[]) {
    this.limiters = limiters;
  }
  when(key: string): number {
    return Math.max(...this.limiters.map((l) => l.when(key)));
  }
  forget(key: string): void {
    for (const l of this.limiters) l.forget(key);
  }
  retries(key: string): number {
    return Math.max(...this.limiters.map((l) => l.retries(key)));
  }
}

/** client-go's DefaultControllerRateLimiter: per-key 5 ms..1000 s exponential, overall 10 qps burst 100. */
export function defaultControllerRateLimiter(): RateLimiter {
  return new MaxOfRateLimiter(new ExponentialFailureRateLimiter(5, 1_000_000), new BucketRateLimiter(10, 100));
}

export interface WorkQueueOptions {
  name?: string;
  rateLimiter?: RateLimiter;
  metrics?: KubeMetrics;
}

export class WorkQueue {
  readonly name: string;
  private readonly queue: string[] = [];
  private readonly dirty = new Set<string>();
  private readonly processing = new Set<string>();
  private readonly addedAt = new Map<string, number>();
  private readonly startedAt = new Map<string, number>();
  /** key -> [readyAt, timer] of a delayed add */
  private readonly waiting = new Map<string, { at: number; timer: NodeJS.Timeout }>();
  private readonly getters: ((key: string | undefined) => void)[] = [];
  private readonly limiter: RateLimiter;
  private readonly metrics: KubeMetrics | undefined;
  private shuttingDown = false;
  private drainWaiters: (() => void)[] = [];

  constructor(opts: WorkQueueOptions = {}) {
    this.name = opts.name ?? 'queue';
    this.limiter = opts.rateLimiter ?? defaultControllerRateLimiter();
    this.metrics = opts.metrics;
  }

  /** Keys queued (not counting those being processed or waiting for a delay). */
  get length(): number {
    return this.queue.length;
  }

  get isShuttingDown(): boolean {
    return this.shuttingDown;
  }

  add(key: string): void {
    if (this.shuttingDown || this.dirty.has(key)) return;
    this.metrics?.workqueueAdds.inc({ name: this.name });
    this.dirty.add(key);
    this.addedAt.set(key, Date.now());
    if (this.processing.has(key)) return;
    this.push(key);
  }

  /** Adds after a delay; of several pending delays for one key, the earliest wins. */
  addAfter(key: string, ms: number): void {
    if (this.shuttingDown) return;
    if (ms <= 0) return this.add(key);
    const at = Date.now() + ms;
    const pending = this.waiting.get(key);
    if (pending && pending.at <= at) return;
    if (pending) clearTimeout(pending.timer);
    const timer = setTimeout(() => {
      this.waiting.delete(key);
      this.add(key);
    }, ms);
    this.waiting.set(key, { at, timer });
  }

  /** Re-adds after the rate limiter's delay for this key (a retry after a failure). */
  addRateLimited(key: string): void {
    this.metrics?.workqueueRetries.inc({ name: this.name });
    this.addAfter(key, this.limiter.when(key));
  }

  /** Clears the key's failure history (after a success). */
  forget(key: string): void {
    this.limiter.forget(key);
  }

  retries(key: string): number {
    return this.limiter.retries(key);
  }

  /** The next key, waiting for one; undefined once the queue shuts down (and, for drain, is empty). */
  get(): Promise<string | undefined> {
    if (this.queue.length > 0) return Promise.resolve(this.take());
    if (this.shuttingDown) return Promise.resolve(undefined);
    return new Promise((resolve) => this.getters.push(resolve));
  }

  /** Marks the key processed; if it was added meanwhile, it is queued again. */
  done(key: string): void {
    this.processing.delete(key);
    const started = this.startedAt.get(key);
    if (started !== undefined) this.metrics?.workqueueWorkDuration.observe({ name: this.name }, (Date.now() - started) / 1000);
    this.startedAt.delete(key);
    if (this.dirty.has(key)) this.push(key);
    if (this.processing.size === 0) for (const w of this.drainWaiters.splice(0)) w();
  }

  /** Stops accepting keys; waiting get() calls return undefined; with drain, resolves once processing is done. */
  async shutDown(opts: { drain?: boolean } = {}): Promise<void> {
    this.shuttingDown = true;
    for (const { timer } of this.waiting.values()) clearTimeout(timer);
    this.waiting.clear();
    for (const g of this.getters.splice(0)) g(undefined);
    if (opts.drain && this.processing.size > 0) await new Promise<void>((r) => this.drainWaiters.push(r));
  }

  private push(key: string): void {
    const getter = this.getters.shift();
    if (getter) {
      this.queue.push(key);
      getter(this.take());
    } else {
      this.queue.push(key);
    }
    this.metrics?.workqueueDepth.set({ name: this.name }, this.queue.length);
  }

  private take(): string {
    const key = this.queue.shift()!;
    this.dirty.delete(key);
    this.processing.add(key);
    const added = this.addedAt.get(key);
    if (added !== undefined) this.metrics?.workqueueQueueDuration.observe({ name: this.name }, (Date.now() - added) / 1000);
    this.addedAt.delete(key);
    this.startedAt.set(key, Date.now());
    this.metrics?.workqueueDepth.set({ name: this.name }, this.queue.length);
    return key;
  }
}
