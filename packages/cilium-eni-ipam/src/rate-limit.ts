/**
 * One token bucket for every EC2 call of the operator (default 4 QPS, burst 20, as Cilium's
 * --limit-ipam-api-qps/--limit-ipam-api-burst), and the retry policy around it (the loop itself is the
 * repository's one retry helper, @cnikit/netlib/retry).
 */
import { sleep, type Backoff } from '@cnikit/netlib/retry';

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

export function errorCode(err: unknown): string {
  const e = err as { name?: string; Code?: string; code?: string } | undefined;
  return e?.Code ?? e?.name ?? e?.code ?? 'Unknown';
}

export function isThrottle(err: unknown): boolean {
  const c = errorCode(err);
  return c === 'RequestLimitExceeded' || c.startsWith('Throttl') || c === 'RequestThrottled' || c === 'TooManyRequestsException';
}

export function isRetryable(err: unknown): boolean {
  const c = errorCode(err);
  if (RETRYABLE.has(c) || NETWORK.has(c)) return true;
  const status = (err as { $metadata?: { httpStatusCode?: number } })?.$metadata?.httpStatusCode;
  return status !== undefined && status >= 500;
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
