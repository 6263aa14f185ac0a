/**
 * The kit's retry policies (client-go's retry.DefaultRetry/DefaultBackoff and RetryOnConflict). The loop, the
 * Backoff shape and sleep() are the repository's one retry helper, in @cnikit/netlib/retry.
 */
import { retry as retryLoop, type Backoff } from '@cnikit/netlib/retry';
import { AbortedError, RetriesExhaustedError, isConflict } from './errors';

export { delays, sleep, ExponentialBackoff, type Backoff } from '@cnikit/netlib/retry';

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

/**
 * Runs fn until it succeeds or throws an error `retriable` rejects, waiting between attempts by the backoff.
 * When attempts run out, throws RetriesExhaustedError with the last error as cause; an abort, AbortedError.
 */
export async function retry<T>(
  what: string,
  backoff: Backoff,
  retriable: (err: unknown) => boolean,
  fn: (attempt: number) => Promise<T>,
  signal?: AbortSignal,
): Promise<T> {
  if (signal?.aborted) throw new AbortedError(what);
  const exhausted = (err: unknown, attempts: number): Error => new RetriesExhaustedError(what, attempts, err);
  try {
    return await retryLoop({ backoff, retriable, signal, exhausted }, fn);
  } catch (err) {
    if (signal?.aborted && !(err instanceof RetriesExhaustedError)) throw new AbortedError(what, { cause: err });
    throw err;
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
