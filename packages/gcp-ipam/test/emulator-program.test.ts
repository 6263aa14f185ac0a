// The GCE emulator as a program (`npm run gce-emulator`), driven from outside as a user driving a rehearsal:
// gcp-ipam's own GceClient (token from the emulated metadata server) against it, and the control API.
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { startListening } from '@cnikit/netlib-testing';
import { GceClient, metadataToken, type GceError } from '../src/gce';

const ROOT = path.join(__dirname, '..', '..', '..');
const ZONE = 'europe-west1-b';
let emulator: Awaited<ReturnType<typeof startListening>>;
let url: string;
const hookLog = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'cnikit-gce-hooks-')), 'hooks.log');

beforeAll(async () => {
  const flags = [
    ['--listen', '127.0.0.1:0'],
    ['--op-duration-ms', '200'],
    ['--instance', `${ZONE}/vm-a=10.0.0.2`],
    ['--subnet', 'europe-west1/default=10.0.0.0/20'],
    ['--on-alias-add', `echo "add $ALIAS_RANGE $INSTANCE $ZONE $NETWORK_IP" >> ${hookLog}`],
    ['--on-alias-remove', `echo "remove $ALIAS_RANGE $INSTANCE $ZONE $NETWORK_IP" >> ${hookLog}`],
  ].flat();
  emulator = await startListening([process.execPath, path.join(ROOT, 'tools', 'emulators', 'run.mjs'), 'gce-emulator', ...flags]);
  url = emulator.line;
}, 60_000);

afterAll(async () => {
  await emulator.stop();
  fs.rmSync(path.dirname(hookLog), { recursive: true, force: true });
});

const control = async (method: string, p: string, body?: unknown): Promise<{ status: number; json: Record<string, unknown> }> => {
  const res = await fetch(`${url}/_emulator/${p}`, { method, body: body === undefined ? undefined : JSON.stringify(body) });
  return { status: res.status, json: (await res.json()) as Record<string, unknown> };
};

test('the flags make the instance and the subnet; the metadata server answers only with Metadata-Flavor: Google', async () => {
  const { json } = await control('GET', 'state');
  expect(json).toMatchObject({
    project: 'test-project',
    opDurationMs: 200,
    // Compute Engine's default rate quotas, per project and minute
    quotas: { default: 1500, read_requests: 1500, operation_read_requests: 1500 },
    instances: [{ zone: ZONE, name: 'vm-a', networkInterfaces: [{ name: 'nic0', networkIP: '10.0.0.2', aliasIpRanges: [] }] }],
    subnets: [expect.objectContaining({ region: 'europe-west1', name: 'default', ipCidrRange: '10.0.0.0/20' })],
  });
  expect((await fetch(`${url}/computeMetadata/v1/instance/service-accounts/default/token`)).status).toBe(403);
  await expect(metadataToken(url)()).resolves.toMatch(/^emulated-/);
});

test('an alias moved between VMs runs the remove hook on the source, then the add hook on the destination', async () => {
  const gce = new GceClient({ project: 'test-project', endpoint: `${url}/compute/v1`, token: metadataToken(url), maxAttempts: 1 });
  try {
    expect((await control('POST', 'instances', { zone: ZONE, name: 'vm-m', networkIP: '10.0.0.9' })).status).toBe(200);
    await gce.updateAliases(ZONE, 'vm-a', 'nic0', (cur) => [...cur, { ipCidrRange: '10.0.8.77/32' }]);
    await gce.updateAliases(ZONE, 'vm-a', 'nic0', (cur) => cur.filter((a) => a.ipCidrRange !== '10.0.8.77/32'));
    await gce.updateAliases(ZONE, 'vm-m', 'nic0', () => [{ ipCidrRange: '10.0.8.77/32' }]);
    const expected = [
      `add 10.0.8.77/32 vm-a ${ZONE} 10.0.0.2`,
      `remove 10.0.8.77/32 vm-a ${ZONE} 10.0.0.2`,
      `add 10.0.8.77/32 vm-m ${ZONE} 10.0.0.9`,
    ];
    // the hooks run after the operations completed, one at a time: wait for the third
    for (let i = 0; i < 100 && !fs.readFileSync(hookLog, { encoding: 'utf8', flag: 'a+' }).includes(expected[2]!); i++)
      await new Promise((r) => setTimeout(r, 50));
    expect(fs.readFileSync(hookLog, 'utf8').trim().split('\n')).toEqual(expected);
    expect((await control('GET', 'state')).json.hookErrors).toEqual([]);
  } finally {
    gce.close();
  }
});

test("gcp-ipam's client adds an alias through an operation; an error injected through the control API reaches it", async () => {
  const gce = new GceClient({ project: 'test-project', endpoint: `${url}/compute/v1`, token: metadataToken(url), maxAttempts: 1 });
  try {
    await gce.updateAliases(ZONE, 'vm-a', 'nic0', () => [{ ipCidrRange: '10.0.8.5/32' }]);
    const { json } = await control('GET', 'state');
    expect((json.instances as { networkInterfaces: { aliasIpRanges: unknown[] }[] }[])[0]!.networkInterfaces[0]!.aliasIpRanges).toEqual([
      { ipCidrRange: '10.0.8.5/32' },
    ]);
    expect(await control('POST', 'inject', { kind: 'instances.get', status: 503, reason: 'backendError' })).toMatchObject({ status: 200 });
    const err = (await gce.getInstance(ZONE, 'vm-a').catch((e: unknown) => e)) as GceError;
    expect(err.status).toBe(503);
    await expect(gce.getInstance(ZONE, 'vm-a')).resolves.toMatchObject({ name: 'vm-a' });
    // a new node joins, and the mutation quota is lowered to nothing: every mutation is throttled as GCE does
    expect((await control('POST', 'instances', { zone: ZONE, name: 'vm-b' })).status).toBe(200);
    expect((await control('PUT', 'config', { quotas: { default: 0 } })).json).toMatchObject({ quotas: { default: 0 } });
    const throttled = (await gce
      .updateAliases(ZONE, 'vm-b', 'nic0', () => [{ ipCidrRange: '10.0.8.6/32' }])
      .catch((e: unknown) => e)) as GceError;
    expect(throttled).toMatchObject({ status: 403, reason: 'rateLimitExceeded' });
  } finally {
    gce.close();
    await control('PUT', 'config', { quotas: { default: 1500 } });
  }
});

test('bad control requests are refused with what is missing', async () => {
  expect(await control('POST', 'instances', { zone: ZONE })).toMatchObject({ status: 400, json: { error: 'zone and name are required' } });
  expect(await control('POST', 'inject', { kind: 'x', status: 200, reason: 'r' })).toMatchObject({ status: 400 });
  expect((await control('GET', 'nope')).status).toBe(404);
});
