/**
 * The one way to wait and retry in this repository: sleep(), a Backoff (the shape of client-go's wait.Backoff)
 * and retry(). The kube kit (conflicts), gcp-ipam (GCE rate limits and busy resources), Terway (OpenAPI
 * throttling) and cilium-eni-ipam (EC2 throttling) each keep only their policy (which errors, which delays)
 * and call this loop. Kept free of imports so a per-pod binary that needs it pays for nothing else.
 */

export interface Backoff {
  /** Attempts in all (the first try included); Infinity retries until `until` or the signal stops it. */
  steps: number;
  /** Delay before the second attempt (ms). */
  initialMs: number;
  /** Each delay is the previous one times this. */
  factor: number;
  /**
   * Adds up to delay*jitter, random: spreads competing callers apart. 1 with a halved initialMs/capMs is
   * AWS's "equal jitter" (a delay between d/2 and d).
   */
  jitter: number;
  /** Upper bound of one delay before jitter (ms). */
  capMs: number;
}

/** The delays (ms) between attempts of a backoff, jitter applied: steps - 1 of them. */
export function* delays(b: Backoff, rand: () => number = Math.random): Generator<number> {
  let d = b.initialMs;
  for (let i = 1; i < b.steps; i++) {
    const base = Math.min(d, b.capMs);
    yield base + (b.jitter > 0 ? rand() * base * b.jitter : 0);
    d *= b.factor;
  }
}

/** Resolves after ms; rejects with the signal's reason as soon as it aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = (): void => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

export interface RetryOptions {
  backoff: Backoff;
  /** Whether a failure is worth another attempt; anything else is thrown at once. */
  retriable: (err: unknown) => boolean;
  /** Epoch ms after which no new attempt starts (the last error is thrown). */
  until?: number;
  signal?: AbortSignal;
  /** What to throw when attempts run out (default: the last error itself). */
  exhausted?: (lastErr: unknown, attempts: number) => unknown;
}

/**
 * Runs fn until it succeeds, fails with an error `retriable` rejects, or the backoff's attempts (or `until`)
 * run out, waiting between attempts by the backoff.
 */
export async function retry<T>(opts: RetryOptions, fn: (attempt: number) => Promise<T>): Promise<T> {
  const waits = delays(opts.backoff);
  for (let attempt = 1; ; attempt++) {
    try {
      return await fn(attempt);
    } catch (err) {
      if (!opts.retriable(err)) throw err;
      const next = waits.next();
      if (next.done || (opts.until !== undefined && Date.now() + next.value > opts.until)) {
        throw opts.exhausted ? opts.exhausted(err, attempt) : err;
      }
      await sleep(next.value, opts.signal);
    }
  }
}

/** Backoff state for loops that run forever (watch reconnects): next() grows the delay, reset() after a success. */
export class ExponentialBackoff {
  private current: number;
  constructor(
    private readonly initialMs = 200,
    private readonly maxMs = 30_000,
    private readonly factor = 2,
    private readonly jitter = 0.2,
  ) {
    this.current = initialMs;
  }
  next(): number {
    const d = this.current;
    this.current = Math.min(this.current * this.factor, this.maxMs);
    return d + Math.random() * d * this.jitter;
  }
  reset(): void {
    this.current = this.initialMs;
  }
}
