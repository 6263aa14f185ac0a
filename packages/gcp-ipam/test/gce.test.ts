// The compute REST client against the fake, and the fake against the API reference's rules.
import { GceClient, GceError, GceOperationError } from '../src/gce';
import { FakeGce } from '@cnikit/gce-emulator';
import { startGce, stopGce, ZONE } from './support';

let fake: FakeGce;
let gce: GceClient;

beforeEach(async () => {
  ({ fake, gce } = await startGce(100, 20));
});
afterEach(() => stopGce(fake, gce));

test('updateNetworkInterface without a fingerprint is refused with 400', async () => {
  const err = await gce.updateNetworkInterface(ZONE, 'vm-a', { name: 'nic0', aliasIpRanges: [] }).catch((e: unknown) => e);
  expect(err).toBeInstanceOf(GceError);
  expect((err as GceError).status).toBe(400);
  expect((err as GceError).reason).toBe('required');
});

test('a stale fingerprint gets 412; updateAliases re-reads and succeeds', async () => {
  const inst = await gce.getInstance(ZONE, 'vm-a');
  const fp = inst.networkInterfaces[0]!.fingerprint!;
  const op = await gce.updateNetworkInterface(ZONE, 'vm-a', {
    name: 'nic0',
    fingerprint: fp,
    aliasIpRanges: [{ ipCidrRange: '10.111.0.5/32' }],
  });
  await gce.waitZoneOperation(ZONE, op);
  const stale = await gce
    .updateNetworkInterface(ZONE, 'vm-a', { name: 'nic0', fingerprint: fp, aliasIpRanges: [] })
    .catch((e: unknown) => e);
  expect((stale as GceError).status).toBe(412);
  expect((stale as GceError).stale).toBe(true);
  fake.inject('instances.updateNetworkInterface', { status: 412, reason: 'conditionNotMet' });
  const calls = await gce.updateAliases(ZONE, 'vm-a', 'nic0', (cur) => [...cur, { ipCidrRange: '10.111.0.6/32' }]);
  expect(calls).toBe(2);
  expect(fake.aliasesOf(ZONE, 'vm-a')).toEqual(['10.111.0.5/32', '10.111.0.6/32']);
});

test('the same requestId returns the same operation (idempotent retry)', async () => {
  const fp = (await gce.getInstance(ZONE, 'vm-a')).networkInterfaces[0]!.fingerprint!;
  const body = { name: 'nic0', fingerprint: fp, aliasIpRanges: [{ ipCidrRange: '10.111.0.7/32' }] };
  const a = await gce.updateNetworkInterface(ZONE, 'vm-a', body, 'req-1');
  const b = await gce.updateNetworkInterface(ZONE, 'vm-a', body, 'req-1'); // fingerprint is stale by now: still the same op
  expect(b.name).toBe(a.name);
  expect(fake.updates).toHaveLength(1);
});

test('operations stay RUNNING for the configured duration; wait returns DONE', async () => {
  fake.opDurationMs = 300;
  const fp = (await gce.getInstance(ZONE, 'vm-a')).networkInterfaces[0]!.fingerprint!;
  const t0 = Date.now();
  const op = await gce.updateNetworkInterface(ZONE, 'vm-a', {
    name: 'nic0',
    fingerprint: fp,
    aliasIpRanges: [{ ipCidrRange: '10.111.0.8/32' }],
  });
  expect(op.status).toBe('RUNNING');
  expect((await gce.getZoneOperation(ZONE, op.name)).status).toBe('RUNNING');
  expect(fake.aliasesOf(ZONE, 'vm-a')).toEqual([]);
  const done = await gce.waitZoneOperation(ZONE, op);
  expect(done.status).toBe('DONE');
  expect(Date.now() - t0).toBeGreaterThanOrEqual(250);
  expect(fake.aliasesOf(ZONE, 'vm-a')).toEqual(['10.111.0.8/32']);
  expect(new FakeGce().opDurationMs).toBe(3000);
});

test('403 rateLimitExceeded is retried with backoff, then gives up', async () => {
  fake.inject('instances.get', { status: 403, reason: 'rateLimitExceeded' }, 2);
  await expect(gce.getInstance(ZONE, 'vm-a')).resolves.toMatchObject({ name: 'vm-a' });
  const few = new GceClient({ project: fake.project, endpoint: fake.computeEndpoint, rateLimitBackoffMs: 5, maxAttempts: 3 });
  fake.inject('instances.get', { status: 403, reason: 'rateLimitExceeded' }, 3);
  const err = await few.getInstance(ZONE, 'vm-a').catch((e: unknown) => e);
  few.close();
  expect((err as GceError).rateLimited).toBe(true);
});

test("a mutation above the project's rate quota gets 403 rateLimitExceeded", async () => {
  fake.setQuota('default', 0); // every mutation is over the quota: deterministic on a loaded machine
  const raw = new GceClient({ project: fake.project, endpoint: fake.computeEndpoint, maxAttempts: 1 });
  const err = await raw
    .updateNetworkInterface(ZONE, 'vm-b', { name: 'nic0', fingerprint: 'x', aliasIpRanges: [] })
    .catch((e: unknown) => e);
  raw.close();
  expect((err as GceError).status).toBe(403);
  expect((err as GceError).reason).toBe('rateLimitExceeded');
});

test('an alias still attached to another instance makes the operation fail; busy instances are waited out', async () => {
  await gce.updateAliases(ZONE, 'vm-a', 'nic0', () => [{ ipCidrRange: '10.111.0.9/32' }]);
  const err = await gce.updateAliases(ZONE, 'vm-b', 'nic0', () => [{ ipCidrRange: '10.111.0.9/32' }]).catch((e: unknown) => e);
  expect(err).toBeInstanceOf(GceOperationError);
  expect((err as Error).message).toMatch(/already being used/);
  // two writers on one instance at once: the second gets resourceNotReady, waits, re-reads (412), and lands
  await Promise.all([
    gce.updateAliases(ZONE, 'vm-b', 'nic0', (c) => [...c, { ipCidrRange: '10.111.0.10/32' }]),
    gce.updateAliases(ZONE, 'vm-b', 'nic0', (c) => [...c, { ipCidrRange: '10.111.0.11/32' }]),
  ]);
  expect(fake.aliasesOf(ZONE, 'vm-b').sort()).toEqual(['10.111.0.10/32', '10.111.0.11/32']);
});
