/** The tests' one polling helper (kernel state, API objects, daemons): every package's tests and e2e use it. */
import { sleep } from '@cnikit/netlib/retry';

/** Polls fn until it returns a truthy value (returned) or the timeout passes (throws with the last value). */
export async function eventually<T>(what: string, fn: () => T | Promise<T>, timeoutMs = 15_000, everyMs = 50): Promise<NonNullable<T>> {
  const deadline = Date.now() + timeoutMs;
  let last: T | undefined;
  let lastErr: unknown;
  for (;;) {
    try {
      last = await fn();
      if (last) return last as NonNullable<T>;
    } catch (err) {
      lastErr = err;
    }
    if (Date.now() > deadline) {
      throw new Error(
        `timed out after ${timeoutMs} ms waiting for ${what} (last value ${JSON.stringify(last)}${lastErr ? `, last error ${(lastErr as Error).message}` : ''})`,
      );
    }
    await sleep(everyMs);
  }
}
