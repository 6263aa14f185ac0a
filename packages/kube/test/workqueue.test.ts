// The work queue's semantics (no server needed): dedup, one worker per key, per-key exponential retries,
// delayed adds, shutdown.
import { BucketRateLimiter, ExponentialFailureRateLimiter, KubeMetrics, WorkQueue, defaultControllerRateLimiter } from '@cnikit/kube';

test('a key added many times while queued is processed once', async () => {
  const q = new WorkQueue({ rateLimiter: new ExponentialFailureRateLimiter(1, 100) });
  for (let i = 0; i < 5; i++) q.add('a');
  q.add('b');
  expect(q.length).toBe(2);
  expect(await q.get()).toBe('a');
  expect(await q.get()).toBe('b');
  expect(q.length).toBe(0);
});

test('a key being processed is not handed out again; added meanwhile it comes back after done()', async () => {
  const q = new WorkQueue();
  q.add('a');
  const k = await q.get();
  q.add('a');
  expect(q.length).toBe(0);
  let second: string | undefined;
  void q.get().then((v) => {
    second = v;
  });
  await new Promise((r) => setImmediate(r));
  expect(second).toBeUndefined();
  q.done(k!);
  await new Promise((r) => setImmediate(r));
  expect(second).toBe('a');
});

test('rate-limited re-adds back off exponentially per key and forget() resets', () => {
  const rl = new ExponentialFailureRateLimiter(5, 1000);
  expect([1, 2, 3, 4, 5].map(() => rl.when('k'))).toEqual([5, 10, 20, 40, 80]);
  expect(rl.when('other')).toBe(5);
  expect(rl.retries('k')).toBe(5);
  for (let i = 0; i < 20; i++) rl.when('k');
  expect(rl.when('k')).toBe(1000);
  rl.forget('k');
  expect(rl.when('k')).toBe(5);
});

test('the token bucket allows a burst, then spaces keys at qps', () => {
  const b = new BucketRateLimiter(10, 3);
  expect([b.when(), b.when(), b.when()]).toEqual([0, 0, 0]);
  expect(b.when()).toBeGreaterThan(50);
  // client-go's default controller limiter: the per-key delay dominates the first retries.
  expect(defaultControllerRateLimiter().when('x')).toBe(5);
});

test('addAfter keeps the earliest time and addRateLimited delays grow', async () => {
  const metrics = new KubeMetrics();
  const q = new WorkQueue({ name: 'q', rateLimiter: new ExponentialFailureRateLimiter(20, 1000), metrics });
  // Order, not elapsed time: 'k' (earliest 30 ms) comes before the 200 ms marker, and its later times
  // (400, 500 ms) were folded into that one delivery: the 600 ms marker is next, not 'k' again.
  q.addAfter('k', 500);
  q.addAfter('k', 30);
  q.addAfter('k', 400);
  q.addAfter('m200', 200);
  expect(await q.get()).toBe('k');
  q.done('k');
  expect(await q.get()).toBe('m200');
  q.done('m200');
  q.addAfter('m600', 400);
  expect(await q.get()).toBe('m600');
  q.done('m600');

  const waits: number[] = [];
  for (let i = 0; i < 3; i++) {
    const s = Date.now();
    q.addRateLimited('k');
    await q.get();
    waits.push(Date.now() - s);
    q.done('k');
  }
  // 20, 40, 80 ms (timers may fire a little late, never early).
  expect(waits[0]).toBeGreaterThanOrEqual(18);
  expect(waits[1]).toBeGreaterThanOrEqual(38);
  expect(waits[2]).toBeGreaterThanOrEqual(78);
  expect(q.retries('k')).toBe(3);
  const text = await metrics.registry.metrics();
  expect(text).toMatch(/workqueue_retries_total\{name="q"\} 3/);
  expect(text).toMatch(/workqueue_adds_total\{name="q"\} 6/);
});

test('shutDown wakes waiting workers and drain waits for keys in progress', async () => {
  const q = new WorkQueue();
  const waiting = q.get();
  q.add('x');
  expect(await waiting).toBe('x');
  const idle = q.get();
  let drained = false;
  const shut = q.shutDown({ drain: true }).then(() => {
    drained = true;
  });
  expect(await idle).toBeUndefined();
  await new Promise((r) => setTimeout(r, 20));
  expect(drained).toBe(false);
  q.done('x');
  await shut;
  expect(drained).toBe(true);
  q.add('y');
  expect(await q.get()).toBeUndefined();
});
