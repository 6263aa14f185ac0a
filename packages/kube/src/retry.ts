/**
 * Backoff and retry helpers (the shapes of client-go's wait.Backoff and retry.RetryOnConflict).
 */
import { AbortedError, RetriesExhaustedError, isConflict } from './errors';

export interface Backoff {
  /** Attempts in all (the first try included). */
  steps: number;
  /** Delay before the second attempt (ms). */
  initialMs: number;
  /** Each delay is the previous one times this. */
  factor: number;
  /** Adds up to delay*jitter, random (spreads competing writers apart). */
  jitter: number;
  /** Upper bound of one delay (ms). */
  capMs: number;
}

/** client-go retry.DefaultRetry: 5 attempts, 10 ms apart, 10 % jitter. */
export const DEFAULT_RETRY: Backoff = { steps: 5, initialMs: 10, factor: 1, jitter: 0.1, capMs: 10 };
/** client-go retry.DefaultBackoff: 4 attempts, 10/50/250 ms. */
export const DEFAULT_BACKOFF: Backoff = { steps: 4, initialMs: 10, factor: 5, jitter: 0.1, capMs: 1000 };
/**
 * The kit's default for update-with-retry. A write conflicts only because another write succeeded in between,
 * so N writers racing on one object need at most N attempts each; 20 attempts with growing, fully jittered
 * delays covers 20 concurrent writers without giving up.
 */
export const CONFLICT_RETRY: Backoff = { steps: 20, initialMs: 5, factor: 1.5, jitter: 1, capMs: 500 };

/** The delays (ms) between attempts of a backoff, jitter applied. */
export function* delays(b: Backoff): Generator<number> {
  let d = b.initialMs;
  for (let i = 1; i < b.steps; i++) {
    const base = Math.min(d, b.capMs);
    yield base + (b.jitter > 0 ? Math.random() * base * b.jitter : 0);
    d *= b.factor;
  }
}

export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(new AbortedError('sleep'));
    const t = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = (): void => {
      clearTimeout(t);
      reject(new AbortedError('sleep'));
    };
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/**
 * Runs fn until it succeeds or throws an error `retriable` rejects, waiting between attempts by the backoff.
 * When attempts run out, throws RetriesExhaustedError with the last error as cause.
 */
export async function retry<T>(
  what: string,
  backoff: Backoff,
  retriable: (err: unknown) => boolean,
  fn: (attempt: number) => Promise<T>,
  signal?: AbortSignal,
): Promise<T> {
  const waits = delays(backoff);
  for (let attempt = 1; ; attempt++) {
    try {
      return await fn(attempt);
    } catch (err) {
      if (!retriable(err)) throw err;
      const next = waits.next();
      if (next.done) throw new RetriesExhaustedError(what, attempt, err);
      await sleep(next.value, signal);
    }
  }
}

/** Retries fn while it fails with 409 Conflict (stale resourceVersion): fn must re-read the object each time. */
export function retryOnConflict<T>(
  fn: (attempt: number) => Promise<T>,
  backoff: Backoff = CONFLICT_RETRY,
  signal?: AbortSignal,
): Promise<T> {
  return retry('update on conflict', backoff, isConflict, fn, signal);
}

/** Exponential backoff state for reconnect loops: next() grows the delay, reset() after a success. */
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
