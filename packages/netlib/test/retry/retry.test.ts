import { delays, ExponentialBackoff, retry, sleep, type Backoff } from '../../src/retry';

const quick: Backoff = { steps: 4, initialMs: 1, factor: 2, jitter: 0, capMs: 3 };
const failing = (errs: unknown[]) => {
  let calls = 0;
  return {
    fn: async (): Promise<string> => {
      const e = errs[calls++];
      if (e === undefined) return 'ok';
      throw e;
    },
    calls: () => calls,
  };
};

test('delays: steps - 1 of them, growing by the factor up to the cap, jitter added on top', () => {
  expect([...delays(quick)]).toEqual([1, 2, 3]);
  expect([...delays({ steps: 3, initialMs: 10, factor: 1, jitter: 0.5, capMs: 10 }, () => 1)]).toEqual([15, 15]);
  expect([...delays({ ...quick, steps: 1 })]).toEqual([]);
});

test('retry: returns the first success, the attempt numbered from 1', async () => {
  const seen: number[] = [];
  const f = failing([new Error('a'), new Error('b')]);
  const r = await retry({ backoff: quick, retriable: () => true }, (n) => (seen.push(n), f.fn()));
  expect(r).toBe('ok');
  expect(seen).toEqual([1, 2, 3]);
});

test('retry: an error the policy rejects is thrown at once', async () => {
  const fatal = new Error('fatal');
  const f = failing([new Error('busy'), fatal]);
  await expect(retry({ backoff: quick, retriable: (e) => (e as Error).message === 'busy' }, f.fn)).rejects.toBe(fatal);
  expect(f.calls()).toBe(2);
});

test('retry: when attempts run out, the last error (or what exhausted makes of it)', async () => {
  const errs = [1, 2, 3, 4, 5].map((i) => new Error(`e${i}`));
  const f = failing(errs);
  await expect(retry({ backoff: quick, retriable: () => true }, f.fn)).rejects.toBe(errs[3]);
  expect(f.calls()).toBe(4);
  const g = failing(errs);
  const exhausted = (last: unknown, n: number) => new Error(`gave up after ${n}: ${(last as Error).message}`);
  await expect(retry({ backoff: quick, retriable: () => true, exhausted }, g.fn)).rejects.toThrow('gave up after 4: e4');
});

test('retry: no attempt starts after `until`', async () => {
  const f = failing(Array.from({ length: 100 }, () => new Error('busy')));
  const backoff: Backoff = { steps: Infinity, initialMs: 20, factor: 1, jitter: 0, capMs: 20 };
  await expect(retry({ backoff, retriable: () => true, until: Date.now() + 50 }, f.fn)).rejects.toThrow('busy');
  expect(f.calls()).toBeGreaterThanOrEqual(2);
  expect(f.calls()).toBeLessThan(100);
});

test('sleep and retry stop with the signal reason when it aborts', async () => {
  const ctl = new AbortController();
  const slow = sleep(10_000, ctl.signal);
  ctl.abort(new Error('stopped'));
  await expect(slow).rejects.toThrow('stopped');
  await expect(sleep(1, ctl.signal)).rejects.toThrow('stopped');
  const backoff: Backoff = { steps: 10, initialMs: 10_000, factor: 1, jitter: 0, capMs: 10_000 };
  const ctl2 = new AbortController();
  const r = retry({ backoff, retriable: () => true, signal: ctl2.signal }, failing([new Error('x')]).fn);
  setTimeout(() => ctl2.abort(new Error('shutdown')), 10);
  await expect(r).rejects.toThrow('shutdown');
});

test('ExponentialBackoff grows to its maximum and starts again after reset', () => {
  const b = new ExponentialBackoff(100, 400, 2, 0);
  expect([b.next(), b.next(), b.next(), b.next()]).toEqual([100, 200, 400, 400]);
  b.reset();
  expect(b.next()).toBe(100);
});
