/**
 * terwayd start-up and GC: metadata and quotas from the fake, leases kept
 * across a daemon crash (state file + cloud ENIs), stale kernel state
 * repaired at start, leaked IPs of pods gone without DEL collected.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { runPlugin, type PluginHandlers } from '@cnikit/netlib';
import { sh, useHostNetns } from '@cnikit/netlib/testing';
import * as grpc from '@grpc/grpc-js';
import { AliyunEniCloud, FakeOpenApi } from '../src/cloud';
import { deviceApi } from '../src/deviceplugin/proto';
import { FakeClock } from '../src/clock';
import * as plugin from '../src/cni/plugin';
import { startTerwayd, type Terwayd } from '../src/daemon/bootstrap';
import { hostVethName } from '../src/datapath/eniip-veth';
import { ipj, makeTopo, type TestNs, type Topo } from './datapath-helpers';

jest.setTimeout(60_000);

let t: Topo;
let api: FakeOpenApi;
let dir: string;
let d: Terwayd | undefined;

beforeEach(async () => {
  t = makeTopo(2);
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'terwayd-'));
  let n = 0;
  api = new FakeOpenApi({
    attachDelayMs: 30,
    onAttached: (eni) => {
      n++;
      sh(t.host.ns, `ip link add eni${n} address ${eni.mac} type veth peer name vpc${n} netns ${t.ext.name}`);
    },
  });
  api.addVSwitch('vsw-node', 'cn-hangzhou-i', '192.168.0.0/24');
  api.addInstanceType('ecs.g7.large', { eniQuantity: 3, eniPrivateIpAddressQuantity: 10 });
  api.addInstance('i-node1', 'ecs.g7.large', 'vsw-node');
  await api.listen();
});

afterEach(async () => {
  await d?.stop();
  d = undefined;
  await api.close();
  t.cleanup();
  fs.rmSync(dir, { recursive: true, force: true });
});

function start(clock?: FakeClock, extra: { devicePluginDir?: string; mode?: 'ENIOnly' } = {}, conf: Record<string, unknown> = {}): Promise<Terwayd> {
  return startTerwayd({
    eniConf: { max_pool_size: 5, security_group: 'sg-1', access_key: 'LTAI-test', access_secret: 'test-secret', service_cidr: '172.16.0.0/16', ...conf },
    socket: path.join(dir, 'eni.socket'),
    stateFile: path.join(dir, 'pod.json'),
    metadataUrl: `http://${api.endpoint}`,
    ecsEndpoint: api.endpoint,
    vpcEndpoint: api.endpoint,
    protocol: 'http',
    hostNs: t.host.ns,
    gcIntervalMs: 0,
    ...(clock ? { clock } : {}),
    ...extra,
  });
}

async function add(pod: TestNs, name: string): Promise<{ code: number; out: Record<string, unknown> }> {
  const env = { CNI_COMMAND: 'ADD', CNI_CONTAINERID: `ctr-${name}`, CNI_NETNS: pod.ns.path, CNI_IFNAME: 'eth0', CNI_PATH: '/opt/cni/bin', CNI_ARGS: `K8S_POD_NAMESPACE=default;K8S_POD_NAME=${name}` };
  const conf = { cniVersion: '1.0.0', name: 'terway', type: 'terway', socket: path.join(dir, 'eni.socket') };
  const r = await useHostNetns(t.host.ns, () => runPlugin(plugin as unknown as PluginHandlers, { about: 't' }, { env, stdin: JSON.stringify(conf) }));
  return { code: r.exitCode, out: JSON.parse(r.stdout) as Record<string, unknown> };
}

const ipOf = (out: Record<string, unknown>): string => (out['ips'] as { address: string }[])[0]!.address.split('/')[0]!;

it('keeps leases across a daemon crash and repairs the kernel at start-up', async () => {
  d = await start();
  expect(d.pool.capacity).toBe(20); // (3 - 1) ENIs x 10 IPs, from DescribeInstanceTypes
  const a = await add(t.pods[0]!, 'a');
  expect(a.code).toBe(0);
  const ip = ipOf(a.out);
  // "Crash": no DEL, no release; a rule of the pod is lost meanwhile, a stale one appears.
  await d.stop();
  d = undefined;
  sh(t.host.ns, `ip rule del to ${ip}/32 lookup main pref 512`);
  sh(t.host.ns, 'ip rule add to 192.168.0.222/32 lookup main pref 512');
  d = await start();
  expect(d.pool.leaseOf('default/a')?.ip).toBe(ip);
  const rules = ipj<{ priority: number; dst?: string }[]>(t.host, 'rule show').filter((r) => r.priority === 512);
  expect(rules.map((r) => r.dst)).toEqual([ip]);
  // No new ENI was created: the existing one was adopted.
  expect(api.count('CreateNetworkInterface')).toBe(1);
  const b = await add(t.pods[1]!, 'b');
  expect(ipOf(b.out)).not.toBe(ip);
});

it('releases the IP of a pod whose netns went away without DEL', async () => {
  const clock = new FakeClock();
  d = await start(clock);
  expect((await add(t.pods[0]!, 'gone')).code).toBe(0);
  expect((await add(t.pods[1]!, 'stays')).code).toBe(0);
  // The runtime destroys the sandbox: the veth pair disappears with it.
  sh(t.host.ns, `ip link del ${hostVethName('default', 'gone')}`);
  expect(await d.gcOnce()).toEqual([]); // first sighting: too young to judge
  await clock.advance(61_000);
  expect(await d.gcOnce()).toEqual(['default/gone']);
  expect(d.pool.leaseOf('default/gone')).toBeUndefined();
  expect(d.pool.leaseOf('default/stays')).toBeDefined();
  const stored = JSON.parse(fs.readFileSync(path.join(dir, 'pod.json'), 'utf8')) as { leases: { key: string }[] };
  expect(stored.leases.map((l) => l.key)).toEqual(['default/stays']);
});

it('ipvlan (eniip_virtual_type): GC does not take leases for want of a host veth, and no policy rules are added', async () => {
  const clock = new FakeClock();
  d = await start(clock, {}, { eniip_virtual_type: 'ipvlan' });
  const r = await d.daemon.allocIP({ K8sPodName: 'v', K8sPodNamespace: 'default', K8sPodInfraContainerId: 'ctr-v', Netns: '', IfName: 'eth0' });
  expect(r.Success).toBe(true);
  expect(await d.gcOnce()).toEqual([]);
  await clock.advance(61_000);
  expect(await d.gcOnce()).toEqual([]);
  expect(d.pool.leaseOf('default/v')).toBeDefined();
  expect(ipj<{ priority: number }[]>(t.host, 'rule show').filter((x) => x.priority === 512 || x.priority === 2048)).toEqual([]);
});

it('registers aliyun/eni with the instance ENI quota when asked', async () => {
  const dpDir = path.join(dir, 'device-plugins');
  fs.mkdirSync(dpDir);
  const registered: string[] = [];
  const kubelet = new grpc.Server();
  kubelet.addService(deviceApi().Registration.service, {
    Register: (call: grpc.ServerUnaryCall<{ resource_name: string }, unknown>, cb: grpc.sendUnaryData<unknown>) => {
      registered.push(call.request.resource_name);
      cb(null, {});
    },
  });
  await new Promise<void>((r, j) => kubelet.bindAsync(`unix://${path.join(dpDir, 'kubelet.sock')}`, grpc.ServerCredentials.createInsecure(), (e) => (e ? j(e) : r())));
  try {
    d = await start(undefined, { devicePluginDir: dpDir });
    expect(registered).toEqual(['aliyun/eni']);
    expect(d.devicePlugin?.devices()).toHaveLength(2); // EniQuantity 3 - the primary ENI
  } finally {
    kubelet.forceShutdown();
  }
});

it('ENIOnly: a whole ENI per pod, kept across a restart; an ENI nobody holds is deleted', async () => {
  d = await start(undefined, { mode: 'ENIOnly' });
  const a = await add(t.pods[0]!, 'a');
  expect(a.code).toBe(0);
  const ip = ipOf(a.out);
  const mine = [...api.enis.values()].find((e) => e.primaryIp === ip)!;
  expect(ipj<{ address: string }[]>(t.pods[0]!, 'link show eth0')[0]!.address).toBe(mine.mac);
  await d.stop();
  d = undefined;
  // While terwayd is down, an ENI gets attached that no pod holds (a pod deleted meanwhile).
  const cloud = new AliyunEniCloud({ regionId: 'cn-hangzhou', instanceId: 'i-node1', accessKeyId: 'LTAI-test', accessKeySecret: 'test-secret', ecsEndpoint: api.endpoint, vpcEndpoint: api.endpoint, protocol: 'http', pollIntervalMs: 10 });
  const leaked = await cloud.createEni({ vswitchId: 'vsw-node', securityGroups: ['sg-1'], ipCount: 1 });
  d = await start(undefined, { mode: 'ENIOnly' });
  expect(d.daemon).toBeDefined();
  expect(api.enis.has(leaked.eniId)).toBe(false);
  expect(api.enis.get(mine.id)?.status).toBe('InUse');
  const again = await add(t.pods[0]!, 'a');
  expect(ipOf(again.out)).toBe(ip);
});
