/** Small helpers shared by the Coil programs. */

/**
 * Runs tasks one at a time per key, concurrently across keys (per-container-ID and per-pool locks: never a
 * global lock). The chain of a key is dropped once it drains.
 */
export class KeyedMutex {
  private readonly tails = new Map<string, Promise<unknown>>();

  async run<T>(key: string, fn: () => Promise<T>): Promise<T> {
    const prev = this.tails.get(key) ?? Promise.resolve();
    const next = prev.then(fn, fn);
    const tail = next.catch(() => undefined);
    this.tails.set(key, tail);
    try {
      return await next;
    } finally {
      if (this.tails.get(key) === tail) this.tails.delete(key);
    }
  }

  get size(): number {
    return this.tails.size;
  }
}

/** "5m", "30s", "1h", "250ms" -> ms. */
export function parseDuration(s: string): number {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m|h)$/.exec(s.trim());
  if (!m) throw new TypeError(`invalid duration ${JSON.stringify(s)} (expected e.g. 250ms, 30s, 5m, 1h)`);
  const mult = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 }[m[2] as 'ms' | 's' | 'm' | 'h'];
  return Math.round(Number(m[1]) * mult);
}
