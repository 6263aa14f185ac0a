// The node-local coalescer on its own (fake GCE, no API server): batching, one bad alias in a batch, requests
// of dead processes, and a flusher that died with requests still queued.
import * as fs from 'node:fs';
import * as path from 'node:path';
import { AliasCoalescer, applyChanges } from '../src/coalescer';
import type { GceClient } from '../src/gce';
import type { FakeGce } from '@cnikit/gce-emulator';
import { startGce, stopGce, tmpDir, ZONE } from './support';

let fake: FakeGce;
let gce: GceClient;
let stateDir: string;
const coalescer = (window = 25): AliasCoalescer =>
  new AliasCoalescer({ stateDir, gce, zone: ZONE, instance: 'vm-a', nic: 'nic0', batchWindowMs: window });
const pendingDir = (): string => path.join(stateDir, 'alias', 'vm-a.nic0', 'pending');

beforeEach(async () => {
  ({ fake, gce } = await startGce(200, 10));
  stateDir = tmpDir('gcp-ipam-coal-');
});
afterEach(() => stopGce(fake, gce));

test('applyChanges: idempotent adds and removes, undefined when nothing changes', () => {
  const cur = [{ ipCidrRange: '10.1.0.5/32', subnetworkRangeName: 'live' }];
  expect(applyChanges(cur, [{ op: 'add', ip: '10.1.0.5' }])).toBeUndefined();
  expect(applyChanges(cur, [{ op: 'remove', ip: '10.1.0.6' }])).toBeUndefined();
  expect(
    applyChanges(cur, [
      { op: 'add', ip: '10.1.0.6', rangeName: 'live' },
      { op: 'remove', ip: '10.1.0.5' },
    ]),
  ).toEqual([{ ipCidrRange: '10.1.0.6/32', subnetworkRangeName: 'live' }]);
});

test('20 concurrent changes in one process: one or two calls, all applied', async () => {
  const c = coalescer();
  const outs = await Promise.all(Array.from({ length: 20 }, (_, i) => c.apply({ op: 'add', ip: `10.1.0.${10 + i}` })));
  expect(fake.aliasesOf(ZONE, 'vm-a')).toHaveLength(20);
  expect(fake.calls['instances.updateNetworkInterface']).toBeLessThanOrEqual(2);
  expect(outs.filter((o) => o.flushed).length).toBeGreaterThanOrEqual(1);
});

test('one bad alias in a batch fails only its own request', async () => {
  await gce.updateAliases(ZONE, 'vm-b', 'nic0', () => [{ ipCidrRange: '10.1.0.99/32' }]); // attached elsewhere
  const c = coalescer(100);
  const [bad, good] = await Promise.allSettled([c.apply({ op: 'add', ip: '10.1.0.99' }), c.apply({ op: 'add', ip: '10.1.0.7' })]);
  expect(bad.status).toBe('rejected');
  expect((bad as PromiseRejectedResult).reason).toMatchObject({ code: 120 });
  expect(good.status).toBe('fulfilled');
  expect(fake.aliasesOf(ZONE, 'vm-a')).toEqual(['10.1.0.7/32']);
});

test('requests of dead processes are dropped; requests a dead flusher left queued are carried by the next one', async () => {
  fs.mkdirSync(pendingDir(), { recursive: true });
  // a request whose process is gone (its runtime will call DEL): dropped
  fs.writeFileSync(
    path.join(pendingDir(), '1-dead.json'),
    JSON.stringify({ id: '1-dead', op: 'add', ip: '10.1.0.50', pid: 2 ** 22 + 12345, at: 1 }),
  );
  // a live process's request left behind by a flusher that died before writing results: carried
  fs.writeFileSync(
    path.join(pendingDir(), '2-orphan.json'),
    JSON.stringify({ id: '2-orphan', op: 'add', ip: '10.1.0.51', pid: process.pid, at: 2 }),
  );
  await coalescer().apply({ op: 'add', ip: '10.1.0.52' });
  expect(fake.aliasesOf(ZONE, 'vm-a').sort()).toEqual(['10.1.0.51/32', '10.1.0.52/32']);
  expect(fs.readdirSync(pendingDir())).toEqual([]);
  expect(fs.existsSync(path.join(stateDir, 'alias', 'vm-a.nic0', 'done', '2-orphan.json'))).toBe(true);
});

test('a cloud outage fails every request of the batch with code 11', async () => {
  fake.inject('instances.get', { status: 503, reason: 'backendError' }, 100);
  const c = coalescer();
  const rs = await Promise.allSettled([c.apply({ op: 'add', ip: '10.1.0.60' }), c.apply({ op: 'add', ip: '10.1.0.61' })]);
  for (const r of rs)
    expect((r as PromiseRejectedResult).reason).toMatchObject({ code: 11, msg: 'gcp-ipam: cloud API unavailable, try again' });
});
