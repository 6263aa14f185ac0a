/**
 * One token bucket for every EC2 call of the operator (default 4 QPS, burst 20, as Cilium's
 * --limit-ipam-api-qps/--limit-ipam-api-burst), and the retry policy around it (the loop itself is the
 * repository's one retry helper, @cnikit/netlib/retry).
 */
import { sleep, type Backoff } from '@cnikit/netlib/retry';
import { Ec2QueryError } from './ec2-query';

export class TokenBucket {
  private tokens: number;
  private last: number;
  private chain: Promise<void> = Promise.resolve();
  /** Total time callers spent waiting for a token, ms. */
  waitedMs = 0;

  constructor(
    readonly qps = 4,
    readonly burst = 20,
    private readonly now: () => number = () => performance.now(),
  ) {
    if (!(qps > 0) || !(burst >= 1)) throw new TypeError(`rate limit: qps must be > 0 and burst >= 1, got qps=${qps} burst=${burst}`);
    this.tokens = burst;
    this.last = now();
  }

  private refill(): void {
    const t = this.now();
    this.tokens = Math.min(this.burst, this.tokens + ((t - this.last) / 1000) * this.qps);
    this.last = t;
  }

  /** Resolves when a token is taken; callers are served in FIFO order. */
  take(signal?: AbortSignal): Promise<void> {
    const next = this.chain.then(async () => {
      this.refill();
      if (this.tokens < 1) {
        const waitMs = ((1 - this.tokens) / this.qps) * 1000;
        this.waitedMs += waitMs;
        await sleep(waitMs, signal);
        this.refill();
      }
      this.tokens -= 1;
    });
    this.chain = next.catch(() => undefined);
    return next;
  }
}

/** EC2 error codes worth retrying (throttling and server-side trouble); everything else fails at once. */
const RETRYABLE = new Set([
  'RequestLimitExceeded',
  'Throttling',
  'ThrottlingException',
  'RequestThrottled',
  'TooManyRequestsException',
  'InternalError',
  'InternalFailure',
  'ServiceUnavailable',
  'Unavailable',
  'RequestTimeout',
  'RequestTimeoutException',
]);
const NETWORK = new Set(['ECONNRESET', 'ECONNREFUSED', 'EPIPE', 'ETIMEDOUT', 'TimeoutError', 'AbortError']);

/**
 * The code that says what went wrong: EC2's error code for an answer EC2 gave (Ec2QueryError), the errno name
 * for a network error (Node's have the plain name "Error" and the errno in `code`), else the error's name
 * (TimeoutError, AbortError, CredentialsError...).
 */
export function errorCode(err: unknown): string {
  if (err instanceof Ec2QueryError) return err.code;
  const e = err as { name?: string; Code?: string; code?: unknown } | undefined;
  if (e?.name === 'Error' && typeof e.code === 'string') return e.code;
  return e?.Code ?? e?.name ?? (typeof e?.code === 'string' ? e.code : undefined) ?? 'Unknown';
}

export function isThrottle(err: unknown): boolean {
  const c = errorCode(err);
  return c === 'RequestLimitExceeded' || c.startsWith('Throttl') || c === 'RequestThrottled' || c === 'TooManyRequestsException';
}

/** Throttling, server-side trouble (by code, or any 5xx EC2 answered) and network errors are retried. */
export function isRetryable(err: unknown): boolean {
  const c = errorCode(err);
  if (RETRYABLE.has(c) || NETWORK.has(c)) return true;
  return err instanceof Ec2QueryError && err.status >= 500;
}

export interface RetryPolicy {
  attempts: number;
  initialMs: number;
  maxMs: number;
}
export const DEFAULT_RETRY: RetryPolicy = { attempts: 6, initialMs: 200, maxMs: 5000 };

/**
 * The policy as a Backoff: delays double from initialMs up to maxMs with "equal jitter" (each between half the
 * delay and the delay), what AWS recommends for throttling.
 */
export function ec2Backoff(p: RetryPolicy): Backoff {
  return { steps: p.attempts, initialMs: p.initialMs / 2, factor: 2, jitter: 1, capMs: p.maxMs / 2 };
}
