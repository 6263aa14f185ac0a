// LeaderRunner against the real API server: a task runs only while its runner leads, stops as soon as
// leadership ends (before a successor starts), and stop() stops it before releasing the Lease.
import { LeaderRunner, Leases, ResourceClient, microTime, type KubeTransport, type Lease, type Startable } from '@cnikit/kube';
import { transportFor, uniqueName } from '@cnikit/kube-testing';
import { cluster, eventually } from './support';

let transport: KubeTransport;
let leases: ResourceClient<Lease>;
beforeAll(() => {
  transport = transportFor(cluster);
  leases = new ResourceClient(transport, Leases, { namespace: 'default' });
});
afterAll(() => transport.close());

/** A task that records, with a timestamp, when it starts and stops. */
class Recorder implements Startable {
  readonly events: { t: number; ev: 'start' | 'stop' }[] = [];
  constructor(private readonly onStop: () => Promise<void> = async () => undefined) {}
  async start(): Promise<void> {
    this.events.push({ t: Date.now(), ev: 'start' });
  }
  async stop(): Promise<void> {
    this.events.push({ t: Date.now(), ev: 'stop' });
    await this.onStop();
  }
  get running(): boolean {
    return this.events.at(-1)?.ev === 'start';
  }
}

const runners: LeaderRunner[] = [];
afterEach(async () => {
  for (const r of runners.splice(0)) await r.stop();
});

function runner(task: Startable, lease: string, identity: string, on: { lost?: string[]; failed?: unknown[] } = {}): LeaderRunner {
  const r = new LeaderRunner(task, {
    transport,
    namespace: 'default',
    name: lease,
    identity,
    leaseDurationMs: 4000,
    renewDeadlineMs: 3000,
    retryPeriodMs: 500,
    onLost: () => on.lost?.push(identity),
    onStartFailed: (err) => on.failed?.push(err),
  });
  runners.push(r);
  return r;
}

test('the task starts when leading; stop() stops it, then releases the Lease', async () => {
  const lease = uniqueName('runner');
  let holderWhenStopped: string | null | undefined;
  const task = new Recorder(async () => {
    holderWhenStopped = (await leases.get(lease)).spec?.holderIdentity;
  });
  const lost: string[] = [];
  const a = runner(task, lease, 'a', { lost });
  const run = a.run();
  await eventually('a leads', () => a.isLeader());
  await eventually('task started', () => task.running);

  await a.stop();
  await run;
  expect(task.events.map((e) => e.ev)).toEqual(['start', 'stop']);
  expect(holderWhenStopped).toBe('a'); // stopped while still holding the Lease: no write after a successor starts
  expect((await leases.get(lease)).spec?.holderIdentity).toBe('');
  expect(lost).toEqual([]);
  expect(a.isLeader()).toBe(false);
}, 30_000);

test('leadership lost (the Lease taken over): the task stops at once, onLost is called, and it never restarts', async () => {
  const lease = uniqueName('runner-lost');
  const task = new Recorder();
  const lost: string[] = [];
  const a = runner(task, lease, 'a', { lost });
  const run = a.run();
  await eventually('task started', () => task.running);

  // Another writer takes the Lease (as a candidate would after this process stalled past the lease).
  await leases.updateWithRetry(lease, (cur) => {
    const now = microTime();
    cur.spec = { ...cur.spec, holderIdentity: 'intruder', acquireTime: now, renewTime: now };
    return cur;
  });
  await run; // leadership ended
  await eventually('task stopped', () => !task.running);
  expect(lost).toEqual(['a']);
  expect(task.events.map((e) => e.ev)).toEqual(['start', 'stop']);
  await a.stop();
  expect(task.events).toHaveLength(2);
  expect((await leases.get(lease)).spec?.holderIdentity).toBe('intruder'); // not released: not ours
}, 30_000);

test('a standby starts only after the old leader stopped its task', async () => {
  const lease = uniqueName('runner-handover');
  const [ta, tb] = [new Recorder(), new Recorder()];
  const lost: string[] = [];
  const a = runner(ta, lease, 'a', { lost });
  void a.run();
  await eventually('a leads', () => a.isLeader());
  const b = runner(tb, lease, 'b', { lost });
  void b.run();
  await new Promise((r) => setTimeout(r, 1000));
  expect(b.isLeader()).toBe(false);
  expect(tb.events).toEqual([]);

  await a.stop();
  await eventually('b runs', () => tb.running, 10_000);
  expect(tb.events[0]!.t).toBeGreaterThanOrEqual(ta.events.find((e) => e.ev === 'stop')!.t);
  expect(lost).toEqual([]);
}, 30_000);

test('a failed start is reported through onStartFailed; stop() before leading never starts the task', async () => {
  const lease = uniqueName('runner-fail');
  const boom = new Error('informers did not sync');
  let stops = 0;
  const failing: Startable = {
    start: () => Promise.reject(boom),
    stop: async () => {
      stops++;
    },
  };
  const failed: unknown[] = [];
  const lost: string[] = [];
  const a = runner(failing, lease, 'a', { failed, lost });
  void a.run();
  await eventually('start failure reported', () => failed.length === 1);
  expect(failed[0]).toBe(boom);
  await a.stop();
  expect(stops).toBe(1); // stop() still undoes what a failed start left
  expect(failed).toHaveLength(1);
  expect(lost).toEqual([]);

  const never = new Recorder();
  const b = runner(never, uniqueName('runner-never'), 'b');
  const run = b.run();
  await b.stop();
  await run;
  await new Promise((r) => setTimeout(r, 200));
  expect(never.events).toEqual([]);
}, 30_000);
