/**
 * terwayd start-up and GC: metadata and quotas from the fake, leases kept
 * across a daemon crash (state file + cloud ENIs), stale kernel state
 * repaired at start, leaked IPs of pods gone without DEL collected.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { runPlugin, type PluginHandlers } from '@cnikit/netlib';
import { eventually, sh, useHostNetns } from '@cnikit/netlib-testing';
import * as grpc from '@grpc/grpc-js';
import type { FakeOpenApi } from '@cnikit/aliyun-emulator';
import { FakeClock } from '@cnikit/terway-testing';
import { deviceApi } from './grpc-descriptors';
import * as plugin from '../src/cni/plugin';
import { startTerwayd, type Terwayd } from '../src/daemon/bootstrap';
import { hostVethName } from '../src/datapath/eniip-veth';
import { ipj, makeTopo, type TestNs, type Topo } from './datapath-helpers';
import { cleanUp, cloudFor, nodeDaemon, startNodeApi, terwayCni } from './support';

jest.setTimeout(60_000);

let t: Topo;
let api: FakeOpenApi;
let dir: string;
let d: Terwayd | undefined;

beforeEach(async () => {
  t = makeTopo(2);
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'terwayd-'));
  let n = 0;
  api = await startNodeApi(
    {
      attachDelayMs: 30,
      onAttached: (eni) => {
        n++;
        sh(t.host.ns, `ip link add eni${n} address ${eni.mac} type veth peer name vpc${n} netns ${t.ext.name}`);
      },
    },
    {
      vswitches: { 'vsw-node': '192.168.0.0/24' },
      instanceType: 'ecs.g7.large',
      quota: { eniQuantity: 3, eniPrivateIpAddressQuantity: 10 },
    },
  );
});

afterEach(async () => {
  await cleanUp(d, api, t, dir);
  d = undefined;
});

function start(
  clock?: FakeClock,
  extra: { devicePluginDir?: string; mode?: 'ENIOnly'; metricsAddress?: string } = {},
  conf: Record<string, unknown> = {},
): Promise<Terwayd> {
  return startTerwayd({
    eniConf: {
      max_pool_size: 5,
      security_group: 'sg-1',
      access_key: 'LTAI-test',
      access_secret: 'test-secret',
      service_cidr: '172.16.0.0/16',
      ...conf,
    },
    ...nodeDaemon(api, dir, t.host.ns),
    ...(clock ? { clock } : {}),
    ...extra,
  });
}

async function add(pod: TestNs, name: string): Promise<{ code: number; out: Record<string, unknown> }> {
  const r = await terwayCni({ hostNs: t.host.ns, socket: path.join(dir, 'eni.socket'), command: 'ADD', pod, name });
  return { code: r.code, out: r.out ?? {} };
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

/** Prometheus text -> {`name{labels}`: value}. */
function parseMetrics(text: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const line of text.split('\n')) {
    const m = /^([a-z_]+(?:\{[^}]*\})?) (\S+)$/.exec(line);
    if (m) out.set(m[1]!, Number(m[2]));
  }
  return out;
}

it('serves Prometheus metrics: pool gauges, OpenAPI latency by API and error, RPC latency, GC and repair counts', async () => {
  api.inject('DescribeInstanceTypes', { code: 'Throttling', status: 400 });
  const clock = new FakeClock();
  d = await start(clock, { metricsAddress: '127.0.0.1:0' });
  expect((await add(t.pods[0]!, 'm1')).code).toBe(0);
  expect((await add(t.pods[1]!, 'm2')).code).toBe(0);
  sh(t.host.ns, `ip link del ${hostVethName('default', 'm1')}`);
  await d.gcOnce();
  await clock.advance(61_000);
  expect(await d.gcOnce()).toEqual(['default/m1']);
  const res = await fetch(`${d.metricsServer!.url}/metrics`);
  expect(res.status).toBe(200);
  expect(res.headers.get('content-type')).toMatch(/^text\/plain/);
  const m = parseMetrics(await res.text());
  const st = d.pool.stats();
  expect(m.get('terway_resource_pool_idle_count{name="eniip"}')).toBe(st.idle);
  expect(m.get('terway_resource_pool_used_count{name="eniip"}')).toBe(1);
  expect(m.get('terway_resource_pool_total_count{name="eniip"}')).toBe(st.idle + st.used + st.reserved + st.releasing);
  expect(m.get('terway_resource_pool_max_idle_count{name="eniip"}')).toBe(5);
  expect(m.get('terway_resource_pool_min_idle_count{name="eniip"}')).toBe(0);
  expect(m.get('terway_resource_pool_capacity{name="eniip"}')).toBe(20);
  // Every OpenAPI request is observed, the throttled one under its error code.
  expect(m.get('terway_aliyun_openapi_latency_count{api="DescribeInstanceTypes",error="Throttling"}')).toBe(1);
  expect(m.get('terway_aliyun_openapi_latency_count{api="DescribeInstanceTypes",error=""}')).toBe(1);
  expect(m.get('terway_aliyun_openapi_latency_count{api="CreateNetworkInterface",error=""}')).toBe(api.count('CreateNetworkInterface'));
  expect(m.get('terway_aliyun_openapi_latency_bucket{le="+Inf",api="CreateNetworkInterface",error=""}')).toBe(
    api.count('CreateNetworkInterface'),
  );
  expect(m.get('terway_rpc_latency_count{method="AllocIP",error=""}')).toBe(2);
  expect(m.get('terway_gc_released_total{mode="veth"}')).toBe(1);
  // The gone pod's two policy rules and its route were left behind without DEL: repair removed them.
  expect(m.get('terway_repair_changes_total{kind="rulesRemoved"}')).toBe(2);
  const health = await fetch(`${d.metricsServer!.url}/healthz`);
  expect(health.status).toBe(200);
});

it('ipvlan (eniip_virtual_type): GC looks into the pod netns, not for a host veth; no policy rules are added', async () => {
  const clock = new FakeClock();
  d = await start(clock, {}, { eniip_virtual_type: 'ipvlan' });
  const r = await d.daemon.allocIP({
    K8sPodName: 'v',
    K8sPodNamespace: 'default',
    K8sPodInfraContainerId: 'ctr-v',
    Netns: '',
    IfName: 'eth0',
  });
  expect(r.Success).toBe(true);
  // A pod whose netns is gone (sandbox destroyed without DEL) and one whose netns has no ipvlan interface with its IP.
  await d.daemon.allocIP({
    K8sPodName: 'gone',
    K8sPodNamespace: 'default',
    K8sPodInfraContainerId: 'ctr-g',
    Netns: path.join(dir, 'no-such-netns'),
    IfName: 'eth0',
  });
  await d.daemon.allocIP({
    K8sPodName: 'empty',
    K8sPodNamespace: 'default',
    K8sPodInfraContainerId: 'ctr-e',
    Netns: t.pods[0]!.ns.path,
    IfName: 'eth0',
  });
  expect(await d.gcOnce()).toEqual([]); // first sighting: too young to judge
  await clock.advance(61_000);
  expect((await d.gcOnce()).sort()).toEqual(['default/empty', 'default/gone']);
  expect(d.pool.leaseOf('default/v')).toBeDefined(); // no netns recorded: kept
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
  await new Promise<void>((r, j) =>
    kubelet.bindAsync(`unix://${path.join(dpDir, 'kubelet.sock')}`, grpc.ServerCredentials.createInsecure(), (e) => (e ? j(e) : r())),
  );
  try {
    d = await start(undefined, { devicePluginDir: dpDir });
    expect(registered).toEqual(['aliyun/eni']);
    expect(d.devicePlugin?.devices()).toHaveLength(2); // EniQuantity 3 - the primary ENI
  } finally {
    kubelet.forceShutdown();
  }
});

it('enable_eni_trunking: a trunk ENI is created once, aliyun/member-eni registered with EniTotalQuantity - EniQuantity, Allocate works', async () => {
  Object.assign(api.instanceTypes.get('ecs.g7.large')!, { eniTrunkSupported: true, eniTotalQuantity: 7 });
  const dpDir = path.join(dir, 'device-plugins');
  fs.mkdirSync(dpDir);
  const registered: { resource_name: string; endpoint: string; version: string }[] = [];
  const kubelet = new grpc.Server();
  kubelet.addService(deviceApi().Registration.service, {
    Register: (
      call: grpc.ServerUnaryCall<{ resource_name: string; endpoint: string; version: string }, unknown>,
      cb: grpc.sendUnaryData<unknown>,
    ) => {
      registered.push(call.request);
      cb(null, {});
    },
  });
  await new Promise<void>((r, j) =>
    kubelet.bindAsync(`unix://${path.join(dpDir, 'kubelet.sock')}`, grpc.ServerCredentials.createInsecure(), (e) => (e ? j(e) : r())),
  );
  type PluginClient = grpc.Client & {
    ListAndWatch(r: object): grpc.ClientReadableStream<{ devices: { ID: string; health: string }[] }>;
    Allocate(r: object, cb: (e: grpc.ServiceError | null, o: { container_responses: object[] }) => void): void;
  };
  try {
    d = await start(undefined, { devicePluginDir: dpDir }, { enable_eni_trunking: true });
    const trunks = [...api.enis.values()].filter((e) => e.type === 'Trunk');
    expect(trunks).toHaveLength(1);
    expect(trunks[0]).toMatchObject({ status: 'InUse', instanceId: 'i-node1' });
    expect(d.trunkEniId).toBe(trunks[0]!.id);
    // The trunk takes one EniQuantity slot: 3 - primary - trunk = 1 ENI of 10 IPs for the pool.
    expect(d.pool.capacity).toBe(10);
    expect(registered.map((r) => [r.resource_name, r.endpoint, r.version])).toEqual([
      ['aliyun/eni', 'terway-eni.sock', 'v1beta1'],
      ['aliyun/member-eni', 'terway-member-eni.sock', 'v1beta1'],
    ]);
    const c = new (deviceApi().DevicePlugin)(
      `unix://${path.join(dpDir, 'terway-member-eni.sock')}`,
      grpc.credentials.createInsecure(),
    ) as unknown as PluginClient;
    const devices = await new Promise<{ ID: string; health: string }[]>((r) => {
      const s = c.ListAndWatch({});
      s.on('data', (m: { devices: { ID: string; health: string }[] }) => {
        r(m.devices);
        s.cancel();
      });
      s.on('error', () => undefined);
    });
    expect(devices.map((x) => x.ID)).toEqual(['aliyun-member-eni-0', 'aliyun-member-eni-1', 'aliyun-member-eni-2', 'aliyun-member-eni-3']); // 7 - 3
    expect(devices.every((x) => x.health === 'Healthy')).toBe(true);
    const alloc = await new Promise<{ container_responses: object[] }>((r, j) =>
      c.Allocate({ container_requests: [{ devices_ids: ['aliyun-member-eni-3'] }] }, (e, o) => (e ? j(e) : r(o))),
    );
    expect(alloc.container_responses).toHaveLength(1);
    c.close();
    // A restart adopts the trunk ENI instead of creating another.
    await d.stop();
    d = await start(undefined, { devicePluginDir: dpDir }, { enable_eni_trunking: true });
    expect(d.trunkEniId).toBe(trunks[0]!.id);
    expect(api.calls.filter((x) => x.action === 'CreateNetworkInterface' && x.params['InstanceType'] === 'Trunk')).toHaveLength(1);
  } finally {
    kubelet.forceShutdown();
  }
});

it('enable_eni_trunking on a type without trunk support: no trunk ENI, no aliyun/member-eni', async () => {
  d = await start(undefined, {}, { enable_eni_trunking: true });
  expect(d.trunkEniId).toBeUndefined();
  expect(d.memberDevicePlugin).toBeUndefined();
  expect([...api.enis.values()].filter((e) => e.type === 'Trunk')).toHaveLength(0);
  expect(d.pool.capacity).toBe(20);
});

it('ip_stack dual: pods get an IPv4 and an IPv6 of one ENI, v6 policy routing, traffic both ways; IPv6 reused and kept across a restart', async () => {
  api.vswitches.get('vsw-node')!.ipv6Cidr = '2408:4005:300::/64';
  Object.assign(api.instanceTypes.get('ecs.g7.large')!, { eniIpv6AddressQuantity: 10 });
  sh(t.ext.ns, 'ip -6 addr add 2408:4005:999::9/128 dev lo');
  d = await start(undefined, {}, { ip_stack: 'dual' });
  const a = await add(t.pods[0]!, 'a');
  if (a.code !== 0) throw new Error(JSON.stringify(a.out));
  const ips = (a.out['ips'] as { address: string; gateway: string }[]).map((x) => [x.address, x.gateway]);
  expect(ips).toHaveLength(2);
  expect(ips[0]![0]).toMatch(/^192\.168\.0\.\d+\/32$/);
  expect(ips[1]![0]).toMatch(/^2408:4005:300::[0-9a-f]+\/128$/);
  expect(ips[1]![1]).toBe('fe80::1');
  const ip4 = ips[0]![0]!.split('/')[0]!;
  const ip6 = ips[1]![0]!.split('/')[0]!;
  const eni = [...api.enis.values()].find((e) => e.type === 'Secondary')!;
  expect(eni.ipv6s).toContain(ip6);
  expect(eni.secondaryIps.concat(eni.primaryIp)).toContain(ip4);
  // Host: v6 rules at the Terway prefs, the ENI table's v6 default via the vSwitch's IPv6 gateway.
  const rules6 = ipj<{ priority: number; src?: string; dst?: string; table: string }[]>(t.host, '-6 rule show').filter(
    (r) => r.priority === 512 || r.priority === 2048,
  );
  expect(rules6.map((r) => [r.priority, r.dst ?? r.src])).toEqual([
    [512, ip6],
    [2048, ip6],
  ]);
  const table = rules6.find((r) => r.priority === 2048)!.table;
  expect(ipj<{ dst: string; gateway: string }[]>(t.host, `-6 route show table ${table}`).find((r) => r.dst === 'default')?.gateway).toBe(
    '2408:4005:300::1',
  );
  // The VPC side: the gateway on the ENI's peer, the pod's v4 and v6 known behind the ENI MAC.
  sh(t.ext.ns, 'ip link set vpc1 up && ip addr add 192.168.0.253/24 dev vpc1 && ip -6 addr add 2408:4005:300::1/64 dev vpc1 nodad');
  sh(
    t.ext.ns,
    `ip neigh replace ${ip4} lladdr ${eni.mac} dev vpc1 nud permanent && ip -6 neigh replace ${ip6} lladdr ${eni.mac} dev vpc1 nud permanent`,
  );
  // Three echoes, one answer needed: once in four runs here the first was lost while the host's ENI link
  // still resolved the gateway (NDP), which the kernel queues for only so long.
  sh(t.pods[0]!.ns, 'ping -6 -c3 -i0.5 -W3 2408:4005:999::9');
  sh(t.ext.ns, `ping -6 -c1 -W3 ${ip6}`);
  const b = await add(t.pods[1]!, 'b');
  const ip6b = (b.out['ips'] as { address: string }[])[1]!.address.split('/')[0]!;
  expect(ip6b).not.toBe(ip6);
  // IPv6s follow the IPv4s assigned on the ENI (prefilled): as many as the pool's IPv4s there, so ADDs make no call.
  await eventually(
    'an IPv6 address per IPv4 address',
    () => api.enis.get(eni.id)!.ipv6s.length === api.enis.get(eni.id)!.secondaryIps.length + 1,
    10_000,
  );
  // DEL a: its v6 rules go; the IPv6 stays on the ENI, idle, and the next pod gets an idle one without a call.
  const env = {
    CNI_COMMAND: 'DEL',
    CNI_CONTAINERID: 'ctr-a',
    CNI_NETNS: t.pods[0]!.ns.path,
    CNI_IFNAME: 'eth0',
    CNI_PATH: '/opt/cni/bin',
    CNI_ARGS: 'K8S_POD_NAMESPACE=default;K8S_POD_NAME=a',
  };
  const del = await useHostNetns(t.host.ns, () =>
    runPlugin(
      plugin as unknown as PluginHandlers,
      { about: 't' },
      { env, stdin: JSON.stringify({ cniVersion: '1.0.0', name: 'terway', type: 'terway', socket: path.join(dir, 'eni.socket') }) },
    ),
  );
  expect(del.exitCode).toBe(0);
  expect(ipj<{ priority: number; src?: string; dst?: string }[]>(t.host, '-6 rule show').filter((r) => (r.dst ?? r.src) === ip6)).toEqual(
    [],
  );
  const assigns = api.count('AssignIpv6Addresses');
  const c = await d.daemon.allocIP({
    K8sPodName: 'c',
    K8sPodNamespace: 'default',
    K8sPodInfraContainerId: 'ctr-c',
    Netns: '',
    IfName: 'eth0',
  });
  expect(c.IPv6).toBe(true);
  const ip6c = c.NetConfs[0]!.BasicInfo!.PodIP.IPv6;
  expect(api.enis.get(eni.id)!.ipv6s).toContain(ip6c);
  expect([ip6b]).not.toContain(ip6c);
  expect(api.count('AssignIpv6Addresses')).toBe(assigns);
  // Figure: AllocIP from the warm pool (c's IPv4 and IPv6 idle again) with 100 ms on every OpenAPI call: no call for either family.
  await d.daemon.releaseIP({ K8sPodName: 'c', K8sPodNamespace: 'default', K8sPodInfraContainerId: 'ctr-c', Netns: '', IfName: 'eth0' });
  const v4calls = api.count('AssignPrivateIpAddresses') + api.count('CreateNetworkInterface');
  api.setLatency(100);
  const t0 = performance.now();
  const w = await d.daemon.allocIP({
    K8sPodName: 'w',
    K8sPodNamespace: 'default',
    K8sPodInfraContainerId: 'ctr-w',
    Netns: '',
    IfName: 'eth0',
  });
  const warmMs = performance.now() - t0;
  expect(api.enis.get(eni.id)!.ipv6s).toContain(w.NetConfs[0]!.BasicInfo!.PodIP.IPv6);
  expect(api.count('AssignIpv6Addresses')).toBe(assigns);
  expect(api.count('AssignPrivateIpAddresses') + api.count('CreateNetworkInterface')).toBe(v4calls);
  api.setLatency(0);
  console.log(
    `terway dual stack: warm AllocIP (IPv4 + IPv6) with 100 ms OpenAPI latency: ${warmMs.toFixed(1)} ms, AssignIpv6Addresses calls during it: 0`,
  );
  // Restart: b keeps its IPv6 (state file + Ipv6Sets of the ENI); repair restores b's lost v6 rule and drops a stale one.
  await d.daemon.releaseIP({ K8sPodName: 'w', K8sPodNamespace: 'default', K8sPodInfraContainerId: 'ctr-w', Netns: '', IfName: 'eth0' });
  await d.stop();
  sh(t.host.ns, `ip -6 rule del to ${ip6b}/128 lookup main pref 512 && ip -6 rule add to 2408:4005:300::dead/128 lookup main pref 512`);
  d = await start(undefined, {}, { ip_stack: 'dual' });
  expect(
    ipj<{ priority: number; dst?: string }[]>(t.host, '-6 rule show')
      .filter((r) => r.priority === 512)
      .map((r) => r.dst)
      .sort(),
  ).toEqual([ip6b]); // b only (c and w released)
  const info = await d.daemon.getIPInfo({
    K8sPodName: 'b',
    K8sPodNamespace: 'default',
    K8sPodInfraContainerId: 'ctr-b',
    Netns: '',
    IfName: 'eth0',
  });
  expect(info.NetConfs[0]!.BasicInfo?.PodIP).toEqual({ IPv4: expect.stringMatching(/^192\.168\.0\./), IPv6: ip6b });
  expect(info.NetConfs[0]!.BasicInfo?.GatewayIP.IPv6).toBe('2408:4005:300::1');
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
  const cloud = cloudFor(api);
  const leaked = await cloud.createEni({ vswitchId: 'vsw-node', securityGroups: ['sg-1'], ipCount: 1 });
  d = await start(undefined, { mode: 'ENIOnly' });
  expect(d.daemon).toBeDefined();
  expect(api.enis.has(leaked.eniId)).toBe(false);
  expect(api.enis.get(mine.id)?.status).toBe('InUse');
  const again = await add(t.pods[0]!, 'a');
  expect(ipOf(again.out)).toBe(ip);
});
