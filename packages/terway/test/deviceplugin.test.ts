/**
 * The aliyun/eni and aliyun/member-eni device plugins against a stand-in
 * kubelet speaking the device-plugin API v1beta1: registration, ListAndWatch
 * following the quota, Allocate.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { ENI_RESOURCE, EniDevicePlugin, MEMBER_ENI_RESOURCE } from '../src/deviceplugin/plugin';
import { API_VERSION, KUBELET_SOCKET, type Device } from '../src/deviceplugin/proto';
import { deviceApi } from './grpc-descriptors';

jest.setTimeout(20_000);

interface Registered {
  version: string;
  endpoint: string;
  resource_name: string;
}

let dir: string;
let kubelet: grpc.Server;
let registered: Registered[];
const plugins: EniDevicePlugin[] = [];

beforeEach(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'terway-dp-'));
  registered = [];
  kubelet = new grpc.Server();
  kubelet.addService(deviceApi().Registration.service, {
    Register: (call: grpc.ServerUnaryCall<Registered, unknown>, cb: grpc.sendUnaryData<unknown>) => {
      if (call.request.version !== API_VERSION)
        return cb({ code: grpc.status.INVALID_ARGUMENT, details: `unsupported version ${call.request.version}` });
      registered.push(call.request);
      cb(null, {});
    },
  });
  await new Promise<void>((r, j) =>
    kubelet.bindAsync(`unix://${path.join(dir, KUBELET_SOCKET)}`, grpc.ServerCredentials.createInsecure(), (e) => (e ? j(e) : r())),
  );
});

afterEach(async () => {
  for (const p of plugins.splice(0)) await p.stop();
  kubelet.forceShutdown();
  fs.rmSync(dir, { recursive: true, force: true });
});

type PluginClient = grpc.Client & {
  GetDevicePluginOptions(r: object, cb: (e: Error | null, o: Record<string, boolean>) => void): void;
  ListAndWatch(r: object): grpc.ClientReadableStream<{ devices: Device[] }>;
  Allocate(r: object, cb: (e: grpc.ServiceError | null, o: { container_responses: object[] }) => void): void;
};

function connect(endpoint: string): PluginClient {
  return new (deviceApi().DevicePlugin)(`unix://${path.join(dir, endpoint)}`, grpc.credentials.createInsecure()) as unknown as PluginClient;
}

it('registers both resources with the kubelet and serves their devices', async () => {
  const eni = new EniDevicePlugin({ resourceName: ENI_RESOURCE, dir, count: 2 });
  const member = new EniDevicePlugin({ resourceName: MEMBER_ENI_RESOURCE, dir, count: 5 });
  plugins.push(eni, member);
  await eni.start();
  await member.start();
  expect(registered.map((r) => [r.resource_name, r.endpoint, r.version])).toEqual([
    ['aliyun/eni', 'terway-eni.sock', 'v1beta1'],
    ['aliyun/member-eni', 'terway-member-eni.sock', 'v1beta1'],
  ]);

  const c = connect(registered[0]!.endpoint);
  const opts = await new Promise<Record<string, boolean>>((r, j) => c.GetDevicePluginOptions({}, (e, o) => (e ? j(e) : r(o))));
  expect(opts).toEqual({ pre_start_required: false, get_preferred_allocation_available: false });

  // ListAndWatch: the quota now, then every change.
  const stream = c.ListAndWatch({});
  const updates: Device[][] = [];
  stream.on('data', (m: { devices: Device[] }) => updates.push(m.devices));
  stream.on('error', () => undefined);
  for (let i = 0; i < 100 && updates.length < 1; i++) await new Promise((r) => setTimeout(r, 10));
  expect(updates[0]).toEqual([
    { ID: 'aliyun-eni-0', health: 'Healthy', topology: null },
    { ID: 'aliyun-eni-1', health: 'Healthy', topology: null },
  ]);
  eni.setCount(3);
  for (let i = 0; i < 100 && updates.length < 2; i++) await new Promise((r) => setTimeout(r, 10));
  expect(updates[1]!.map((d) => d.ID)).toEqual(['aliyun-eni-0', 'aliyun-eni-1', 'aliyun-eni-2']);

  const alloc = await new Promise<{ container_responses: object[] }>((r, j) =>
    c.Allocate({ container_requests: [{ devices_ids: ['aliyun-eni-2'] }, { devices_ids: ['aliyun-eni-0'] }] }, (e, o) => (e ? j(e) : r(o))),
  );
  expect(alloc.container_responses).toHaveLength(2);
  const bad = await new Promise<grpc.ServiceError | null>((r) =>
    c.Allocate({ container_requests: [{ devices_ids: ['aliyun-eni-9'] }] }, (e) => r(e)),
  );
  expect(bad?.code).toBe(grpc.status.INVALID_ARGUMENT);
  stream.cancel();
  c.close();

  const m = connect(registered[1]!.endpoint);
  const first = await new Promise<Device[]>((r) =>
    m
      .ListAndWatch({})
      .on('data', (x: { devices: Device[] }) => r(x.devices))
      .on('error', () => undefined),
  );
  expect(first).toHaveLength(5);
  m.close();
});

it('registers again when the kubelet restarts (kubelet.sock recreated)', async () => {
  const p = new EniDevicePlugin({ resourceName: ENI_RESOURCE, dir, count: 1 });
  plugins.push(p);
  await p.start();
  expect(registered).toHaveLength(1);
  // The kubelet restarts: its socket goes and comes back with a fresh registry.
  kubelet.forceShutdown();
  fs.rmSync(path.join(dir, KUBELET_SOCKET), { force: true });
  registered = [];
  kubelet = new grpc.Server();
  kubelet.addService(deviceApi().Registration.service, {
    Register: (call: grpc.ServerUnaryCall<Registered, unknown>, cb: grpc.sendUnaryData<unknown>) => {
      registered.push(call.request);
      cb(null, {});
    },
  });
  await new Promise<void>((r, j) =>
    kubelet.bindAsync(`unix://${path.join(dir, KUBELET_SOCKET)}`, grpc.ServerCredentials.createInsecure(), (e) => (e ? j(e) : r())),
  );
  // Wait for the plugin's side (its callback comes after the kubelet has recorded the call).
  for (let i = 0; i < 300 && p.registrations < 2; i++) await new Promise((r) => setTimeout(r, 10));
  expect(registered.map((r) => r.resource_name)).toEqual(['aliyun/eni']);
  expect(p.registrations).toBe(2);
});

it('fails clearly when the kubelet is not there', async () => {
  const p = new EniDevicePlugin({ resourceName: ENI_RESOURCE, dir: path.join(dir, 'nokubelet'), count: 1 });
  plugins.push(p);
  await expect(p.start()).rejects.toThrow(/aliyun\/eni: register with the kubelet/);
});

it('ListAndWatch stays open across kubelet disconnects and ends with OK trailers when the plugin stops', async () => {
  const p = new EniDevicePlugin({ resourceName: ENI_RESOURCE, dir, count: 2 });
  plugins.push(p);
  await p.start();
  // a kubelet connection that goes away: the plugin forgets its stream, a new one gets the devices
  const gone = connect(registered[0]!.endpoint);
  const first = gone.ListAndWatch({});
  first.on('error', () => undefined);
  await new Promise((r) => first.once('data', r));
  first.cancel();
  gone.close();
  const c = connect(registered[0]!.endpoint);
  const stream = c.ListAndWatch({});
  const updates: Device[][] = [];
  stream.on('data', (m: { devices: Device[] }) => updates.push(m.devices));
  const status = new Promise<grpc.StatusObject>((r) => stream.on('status', r));
  stream.on('error', () => undefined);
  for (let i = 0; i < 100 && updates.length < 1; i++) await new Promise((r) => setTimeout(r, 10));
  p.setCount(1);
  for (let i = 0; i < 100 && updates.length < 2; i++) await new Promise((r) => setTimeout(r, 10));
  expect(updates.map((u) => u.length)).toEqual([2, 1]);
  await p.stop();
  plugins.splice(plugins.indexOf(p), 1);
  expect((await status).code).toBe(grpc.status.OK);
  expect(fs.existsSync(p.socket)).toBe(false);
  c.close();
});

it('a kubelet that refuses the registration: its status message in the error', async () => {
  const p = new EniDevicePlugin({ resourceName: ENI_RESOURCE, dir, count: 1 });
  plugins.push(p);
  kubelet.forceShutdown();
  fs.rmSync(path.join(dir, KUBELET_SOCKET), { force: true });
  kubelet = new grpc.Server();
  kubelet.addService(deviceApi().Registration.service, {
    Register: (_call: grpc.ServerUnaryCall<Registered, unknown>, cb: grpc.sendUnaryData<unknown>) =>
      cb({ code: grpc.status.INVALID_ARGUMENT, details: 'unsupported version v0' }),
  });
  await new Promise<void>((r, j) =>
    kubelet.bindAsync(`unix://${path.join(dir, KUBELET_SOCKET)}`, grpc.ServerCredentials.createInsecure(), (e) => (e ? j(e) : r())),
  );
  await expect(p.start()).rejects.toThrow(/aliyun\/eni: register with the kubelet: .*unsupported version v0/);
});
