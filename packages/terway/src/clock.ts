/**
 * Time as the pool sees it: `now()` and one-shot timers. The daemon uses the
 * real clock; tests and the benchmark drive a FakeClock (@cnikit/terway-testing) by hand so idle
 * reclaim, intervals and timeouts are exact and instant.
 */
export interface Clock {
  now(): number;
  /** Runs `fn` once after `ms`; returns a cancel function. */
  setTimer(ms: number, fn: () => void): () => void;
}

export const realClock: Clock = {
  now: () => Date.now(),
  setTimer(ms, fn) {
    const t = setTimeout(fn, ms);
    t.unref?.();
    return () => clearTimeout(t);
  },
};
