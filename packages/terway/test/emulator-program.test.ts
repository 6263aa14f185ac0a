// The Alibaba Cloud emulator as a program (`npm run aliyun-emulator`), driven from outside as a user driving a
// rehearsal: terway's own cloud client against it, the on-attach hook that makes an ENI
// appear on a node, the address hooks that make the VPC deliver an ENI's IPs, the metadata service answering
// each VM as its own, a per-minute rate limit, an injected outage and an ENI visible late.
import * as fs from 'node:fs';
import * as http from 'node:http';
import * as os from 'node:os';
import * as path from 'node:path';
import { startListening } from '@cnikit/netlib-testing';
import { AliyunEniCloud, type CloudError } from '../src/cloud/aliyun';

const ROOT = path.join(__dirname, '..', '..', '..');
let emulator: Awaited<ReturnType<typeof startListening>>;
let endpoint: string;
let dir: string;

beforeAll(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'aliyun-emulator-'));
  const flags = [
    ['--listen', '127.0.0.2:0'], // not 127.0.0.1: the endpoint printed must be the address it listens on
    ['--vswitch', 'vsw-a/cn-hangzhou-h=10.1.0.0/24'],
    ['--vswitch', 'vsw-lo/cn-hangzhou-h=127.0.0.0/24'],
    ['--instance-type', 'ecs.g7.large=5,10'],
    ['--instance', 'i-node1:ecs.g7.large:vsw-a'],
    ['--instance', 'i-node2:ecs.g7.large:vsw-lo:127.0.0.3'],
    ['--rate-limit', 'CreateNetworkInterface=2/min'],
    ['--on-attach', `echo "$ENI_ID $INSTANCE_ID $DEVICE_INDEX" >> ${dir}/attached`],
    ['--on-ip-assign', `echo "+ $ENI_ID $ENI_MAC $IPS" >> ${dir}/ips`],
    ['--on-ip-unassign', `echo "- $ENI_ID $ENI_MAC $IPS" >> ${dir}/ips`],
  ].flat();
  emulator = await startListening([process.execPath, path.join(ROOT, 'tools', 'emulators', 'run.mjs'), 'aliyun-emulator', ...flags]);
  endpoint = emulator.line;
}, 60_000);

afterAll(async () => {
  await emulator.stop();
  fs.rmSync(dir, { recursive: true, force: true });
});

const control = async (method: string, p: string, body?: unknown): Promise<{ status: number; json: Record<string, unknown> }> => {
  const res = await fetch(`http://${endpoint}/_emulator/${p}`, { method, body: body === undefined ? undefined : JSON.stringify(body) });
  return { status: res.status, json: (await res.json()) as Record<string, unknown> };
};

const cloudOpts = (): ConstructorParameters<typeof AliyunEniCloud>[0] => ({
  regionId: 'cn-hangzhou',
  instanceId: 'i-node1',
  accessKeyId: 'LTAI-test',
  accessKeySecret: 'test-secret',
  ecsEndpoint: endpoint,
  vpcEndpoint: endpoint,
  protocol: 'http',
  pollIntervalMs: 20,
  maxRetries: 0,
});
const cloud = (): AliyunEniCloud => new AliyunEniCloud(cloudOpts());

test('it prints where it listens: the address given (a node reaches the host leg, not its own loopback)', () => {
  expect(endpoint).toMatch(/^127\.0\.0\.2:\d+$/);
});

test('an ENI created and attached through the terway client runs the on-attach hook; a third create in the minute is throttled', async () => {
  const c = cloud();
  const a = await c.createEni({ vswitchId: 'vsw-a', securityGroups: ['sg-1'], ipCount: 2 });
  expect(a).toMatchObject({ ips: [expect.stringMatching(/^10\.1\.0\./), expect.stringMatching(/^10\.1\.0\./)] });
  expect(fs.readFileSync(path.join(dir, 'attached'), 'utf8')).toMatch(new RegExp(`^${a.eniId} i-node1 1\\n$`));
  await c.createEni({ vswitchId: 'vsw-a', securityGroups: ['sg-1'], ipCount: 1 });
  const err = (await c.createEni({ vswitchId: 'vsw-a', securityGroups: ['sg-1'], ipCount: 1 }).catch((e: unknown) => e)) as CloudError;
  expect(err.code).toBe('Throttling');
  const { json } = await control('GET', 'state');
  expect(json.rateLimits).toEqual({ CreateNetworkInterface: { count: 2, windowMs: 60_000 } });
  expect((json.enis as { instanceId?: string }[]).filter((e) => e.instanceId === 'i-node1')).toHaveLength(3);
});

/** A metadata path as the VM at `from` asks it (its own address as the source). */
function metadataFrom(from: string | undefined, p: string): Promise<string> {
  const [host, port] = endpoint.split(':');
  return new Promise((resolve, reject) =>
    http
      .get({ host, port: Number(port), path: `/latest/meta-data/${p}`, ...(from ? { localAddress: from } : {}) }, (res) => {
        let body = '';
        res.on('data', (c: Buffer) => (body += c.toString()));
        res.on('end', () => resolve(body));
      })
      .on('error', reject),
  );
}

test('the metadata service answers each VM as its own: the instance whose primary IP asks; anyone else gets the first', async () => {
  expect(await metadataFrom('127.0.0.3', 'instance-id')).toBe('i-node2');
  expect(await metadataFrom('127.0.0.3', 'private-ipv4')).toBe('127.0.0.3');
  expect(await metadataFrom('127.0.0.4', 'instance-id')).toBe('i-node1');
  expect(await metadataFrom(undefined, 'instance-id')).toBe('i-node1');
});

test('the address hooks follow every IP of a secondary ENI, in the API order: created, assigned, unassigned, deleted', async () => {
  await control('PUT', 'config', { rateLimits: null });
  const c = new AliyunEniCloud({ ...cloudOpts(), instanceId: 'i-node2' });
  fs.rmSync(path.join(dir, 'ips'), { force: true });
  const eni = await c.createEni({ vswitchId: 'vsw-lo', securityGroups: ['sg-1'], ipCount: 2 });
  const more = await c.assignIps(eni.eniId, 2);
  await c.unassignIps(eni.eniId, [more[0]!]);
  await c.deleteEni(eni.eniId);
  const lines = (): string[] => fs.readFileSync(path.join(dir, 'ips'), 'utf8').trim().split('\n');
  for (let i = 0; i < 100 && lines().length < 4; i++) await new Promise((r) => setTimeout(r, 20));
  const m = /^\+ (\S+) (\S+) /.exec(lines()[0]!)!;
  expect(m[1]).toBe(eni.eniId);
  expect(lines()).toEqual([
    `+ ${eni.eniId} ${m[2]} ${eni.ips.join(' ')}`,
    `+ ${eni.eniId} ${m[2]} ${more.join(' ')}`,
    `- ${eni.eniId} ${m[2]} ${more[0]}`,
    `- ${eni.eniId} ${m[2]} ${[...eni.ips, more[1]].join(' ')}`,
  ]);
  expect(m[2]).toMatch(/^00:16:3e:/);
});

test('an outage injected through the control API reaches the client; an ENI visible late is waited for', async () => {
  expect((await control('POST', 'inject', { action: 'DescribeNetworkInterfaces', code: 'ServiceUnavailable', status: 503 })).status).toBe(
    200,
  );
  const c = cloud();
  const err = (await c.listEnis({ instanceId: 'i-node1' }).catch((e: unknown) => e)) as CloudError;
  expect(err.code).toBe('ServiceUnavailable');
  expect(await c.listEnis({ instanceId: 'i-node1' })).toHaveLength(3);
  // the API's reads lag its writes: the new ENI is not listed for 500 ms, and the client waits it out
  await control('PUT', 'config', { rateLimits: null, visibleAfterMs: 500 });
  const t0 = Date.now();
  const late = await c.createEni({ vswitchId: 'vsw-a', securityGroups: ['sg-1'], ipCount: 1 });
  expect(Date.now() - t0).toBeGreaterThanOrEqual(500);
  expect((await c.listEnis({ ids: [late.eniId] }))[0]).toMatchObject({ status: 'InUse' });
});

test('bad control requests are refused with what is missing', async () => {
  expect(await control('POST', 'instances', { id: 'i-x', type: 'nope', vswitchId: 'vsw-a' })).toMatchObject({ status: 400 });
  expect(await control('POST', 'inject', { action: 'X', code: 'Y', status: 200 })).toMatchObject({ status: 400 });
  expect((await control('GET', 'nope')).status).toBe(404);
});
