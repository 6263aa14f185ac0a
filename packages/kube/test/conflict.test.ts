// Optimistic concurrency: 20 writers race read-modify-write on one object; every write succeeds through 409
// Conflict retries, and no update is lost.
import { ConfigMaps, ResourceClient, isConflict, retryOnConflict, type ConfigMap, type KubeTransport } from '@cnikit/kube';
import { transportFor, uniqueName } from '@cnikit/kube-testing';
import { cluster } from './support';

let transport: KubeTransport;
let cms: ResourceClient<ConfigMap>;

beforeAll(() => {
  transport = transportFor(cluster);
  cms = new ResourceClient(transport, ConfigMaps, { namespace: 'default' });
});
afterAll(() => transport.close());

test('20 concurrent writers on one object all succeed through conflict retries with no lost update', async () => {
  const name = uniqueName('race');
  await cms.create({ metadata: { name }, data: { counter: '0', writers: '' } });
  const WRITERS = 20;
  const attempts: number[] = new Array(WRITERS).fill(0);
  // All writers read first, then all write: the first round is a guaranteed pile-up of conflicts.
  let ready = 0;
  let release!: () => void;
  const gate = new Promise<void>((r) => {
    release = r;
  });

  const results = await Promise.allSettled(
    Array.from({ length: WRITERS }, (_, i) =>
      cms.updateWithRetry(name, async (cm, attempt) => {
        attempts[i] = attempt;
        if (attempt === 1 && ++ready === WRITERS) release();
        if (attempt === 1) await gate;
        const data = cm.data ?? {};
        data.counter = String(Number(data.counter) + 1);
        data.writers = data.writers ? `${data.writers},w${i}` : `w${i}`;
        cm.data = data;
      }),
    ),
  );

  const failed = results.filter((r) => r.status === 'rejected');
  expect(failed).toEqual([]);
  const final = await cms.get(name);
  expect(final.data?.counter).toBe(String(WRITERS));
  expect(final.data?.writers?.split(',').sort()).toEqual(Array.from({ length: WRITERS }, (_, i) => `w${i}`).sort());
  // There really was contention: all but one writer conflicted at least once.
  const conflicted = attempts.filter((a) => a > 1).length;
  expect(conflicted).toBeGreaterThanOrEqual(WRITERS - 1);
  // resourceVersion moved once per successful write (plus the create).
  process.stderr.write(`conflict test: attempts per writer ${JSON.stringify(attempts)}, max ${Math.max(...attempts)}\n`);
  await cms.delete(name);
});

test('retryOnConflict gives up after its steps, the last conflict as cause', async () => {
  const name = uniqueName('race-limit');
  const created = await cms.create({ metadata: { name }, data: { v: '0' } });
  await cms.patch(name, { data: { v: '1' } });
  // Always writing the stale copy: every attempt conflicts, so the retry budget runs out.
  let tries = 0;
  const err = await retryOnConflict(
    async () => {
      tries++;
      return cms.update(created);
    },
    { steps: 3, initialMs: 1, factor: 1, jitter: 0, capMs: 1 },
  ).catch((e: unknown) => e);
  expect(tries).toBe(3);
  expect((err as Error & { code: string }).code).toBe('ERR_KUBE_RETRIES_EXHAUSTED');
  expect(isConflict((err as Error).cause)).toBe(true);
  await cms.delete(name);
});
