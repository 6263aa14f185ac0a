/** A manual Clock for terway's tests and benchmark: timers fire only inside `advance()`. */
import type { Clock } from '@cnikit/terway';

interface Timer {
  at: number;
  seq: number;
  fn: () => void;
}

/** A manual clock: timers fire only inside `advance()`, in due order. */
export class FakeClock implements Clock {
  private t: number;
  private seq = 0;
  private timers: Timer[] = [];

  constructor(start = 1_000_000) {
    this.t = start;
  }

  now(): number {
    return this.t;
  }

  setTimer(ms: number, fn: () => void): () => void {
    const timer: Timer = { at: this.t + Math.max(0, ms), seq: this.seq++, fn };
    this.timers.push(timer);
    return () => {
      this.timers = this.timers.filter((x) => x !== timer);
    };
  }

  get pending(): number {
    return this.timers.length;
  }

  /**
   * Moves time forward by `ms`, firing due timers in order and letting the
   * promise jobs they start settle between them.
   */
  async advance(ms: number): Promise<void> {
    const end = this.t + ms;
    for (;;) {
      await flush();
      const due = this.timers.filter((x) => x.at <= end).sort((a, b) => a.at - b.at || a.seq - b.seq)[0];
      if (!due) break;
      this.timers = this.timers.filter((x) => x !== due);
      this.t = Math.max(this.t, due.at);
      due.fn();
    }
    this.t = end;
    await flush();
  }
}

/** Lets pending promise jobs (and the ones they queue) run. */
export async function flush(rounds = 20): Promise<void> {
  for (let i = 0; i < rounds; i++) await new Promise<void>((r) => setImmediate(r));
}
