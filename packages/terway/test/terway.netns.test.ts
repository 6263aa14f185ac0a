/**
 * The whole stack in namespaces: the terway CNI binary (in-process, the test
 * "host" netns as its host) -> gRPC on a UNIX socket -> terwayd -> the pool ->
 * the official SDK -> the fake OpenAPI, whose attached ENIs appear as veths
 * into an "ext" netns standing for the VPC.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { runPlugin, type PluginHandlers } from '@cnikit/netlib';
import { sh, useHostNetns } from '@cnikit/netlib-testing';
import { FakeOpenApi } from '@cnikit/terway-testing';
import { AliyunEniCloud } from '../src/cloud';
import { realClock } from '../src/clock';
import * as plugin from '../src/cni/plugin';
import { TerwayDaemon, type PodMeta } from '../src/daemon/daemon';
import { ExclusiveEniAllocator } from '../src/daemon/exclusive';
import { TerwayServer } from '../src/daemon/server';
import { LeaseStore } from '../src/daemon/store';
import { hostVethName } from '../src/datapath/eniip-veth';
import { EniIpPool, parsePoolConfig } from '../src/pool';
import { ipj, makeTopo, type TestNs, type Topo } from './datapath-helpers';

jest.setTimeout(60_000);

const VERSIONS = ['0.4.0', '1.0.0', '1.1.0'];

interface Stack {
  t: Topo;
  api: FakeOpenApi;
  pool: EniIpPool;
  daemon: TerwayDaemon;
  server: TerwayServer;
  socket: string;
  dir: string;
  pods: Map<string, PodMeta>;
  stop(): Promise<void>;
}

async function stack(
  opts: { pods?: number; quota?: { eniQuantity: number; eniPrivateIpAddressQuantity: number }; exclusive?: boolean } = {},
): Promise<Stack> {
  const t = makeTopo(opts.pods ?? 2);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'terway-'));
  let n = 0;
  const api = new FakeOpenApi({
    attachDelayMs: 40,
    onAttached: (eni) => {
      n++;
      sh(t.host.ns, `ip link add eni${n} address ${eni.mac} type veth peer name vpc${n} netns ${t.ext.name}`);
      sh(t.ext.ns, `ip link set vpc${n} up`);
      if (n === 1) sh(t.ext.ns, 'ip addr add 192.168.0.253/24 dev vpc1');
    },
    // Detached: the NIC leaves the instance.
    onDetached: (eni) => {
      const l = ipj<{ ifname: string; address: string }[]>(t.host, 'link show').find((x) => x.address === eni.mac);
      if (l) sh(t.host.ns, `ip link del ${l.ifname}`);
    },
  });
  api.addVSwitch('vsw-a', 'cn-hangzhou-i', '192.168.0.0/24');
  api.addInstanceType('ecs.test', opts.quota ?? { eniQuantity: 3, eniPrivateIpAddressQuantity: 10 });
  api.addInstance('i-node1', 'ecs.test', 'vsw-a');
  await api.listen();
  const cloud = new AliyunEniCloud({
    regionId: 'cn-hangzhou',
    instanceId: 'i-node1',
    accessKeyId: 'LTAI-test',
    accessKeySecret: 'test-secret',
    ecsEndpoint: api.endpoint,
    vpcEndpoint: api.endpoint,
    protocol: 'http',
    pollIntervalMs: 10,
  });
  const pool = new EniIpPool({
    config: parsePoolConfig({ max_pool_size: 5, security_groups: ['sg-1'], vswitches: { 'cn-hangzhou-i': ['vsw-a'] } }),
    quota: await cloud.instanceQuota('ecs.test'),
    cloud,
    clock: realClock,
    zone: 'cn-hangzhou-i',
  });
  const pods = new Map<string, PodMeta>();
  const source = opts.exclusive
    ? new ExclusiveEniAllocator({
        cloud,
        config: parsePoolConfig({ security_groups: ['sg-1'], vswitches: { 'cn-hangzhou-i': ['vsw-a'] } }),
        quota: await cloud.instanceQuota('ecs.test'),
        zone: 'cn-hangzhou-i',
      })
    : pool;
  const podSource = { get: async (ns: string, name: string) => pods.get(`${ns}/${name}`) };
  const daemon = new TerwayDaemon({
    pool: source,
    store: new LeaseStore(path.join(dir, 'pod.json')),
    pods: podSource,
    serviceCidr: '10.96.0.0/12',
    ...(opts.exclusive ? { ipType: 'TypeVPCENI' as const } : {}),
  });
  const socket = path.join(dir, 'eni.socket');
  const server = new TerwayServer(daemon, socket);
  await server.start();
  return {
    t,
    api,
    pool,
    daemon,
    server,
    socket,
    dir,
    pods,
    async stop() {
      pool.stop();
      await server.stop();
      await api.close();
      t.cleanup();
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}

async function cni(
  s: Stack,
  command: 'ADD' | 'DEL' | 'CHECK' | 'STATUS',
  pod: TestNs,
  name: string,
  version = '1.0.0',
  extra: Record<string, unknown> = {},
  cid = `ctr-${name}`,
): Promise<{ code: number; out: Record<string, unknown> | undefined }> {
  const conf = { cniVersion: version, name: 'terway', type: 'terway', socket: s.socket, ...extra };
  const env = {
    CNI_COMMAND: command,
    CNI_CONTAINERID: cid,
    CNI_NETNS: pod.ns.path,
    CNI_IFNAME: 'eth0',
    CNI_PATH: '/opt/cni/bin',
    CNI_ARGS: `IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=${name};K8S_POD_INFRA_CONTAINER_ID=${cid}`,
  };
  const r = await useHostNetns(s.t.host.ns, () =>
    runPlugin(plugin as unknown as PluginHandlers, { about: 'terway test' }, { env, stdin: JSON.stringify(conf) }),
  );
  return { code: r.exitCode, out: r.stdout.trim() ? (JSON.parse(r.stdout) as Record<string, unknown>) : undefined };
}

function podIpOf(out: Record<string, unknown> | undefined): string {
  return (out?.['ips'] as { address: string }[])[0]!.address.split('/')[0]!;
}

let s: Stack;
afterEach(async () => {
  await s?.stop();
});

describe.each(VERSIONS)('terway CNI + terwayd [%s]', (version) => {
  it('ADD gets an ENI IP from the cloud and wires it; DEL undoes it, twice', async () => {
    s = await stack();
    const add = await cni(s, 'ADD', s.t.pods[0]!, 'web-0', version);
    expect(add.code).toBe(0);
    expect(add.out?.['cniVersion']).toBe(version);
    const ip = podIpOf(add.out);
    expect(ip).toMatch(/^192\.168\.0\./);
    expect((add.out?.['interfaces'] as { name: string }[]).map((i) => i.name)).toEqual([hostVethName('default', 'web-0'), 'eth0']);
    // The ENI came through the API: created, attached, InUse, with the pod's IP.
    const eni = [...s.api.enis.values()].find((e) => e.type === 'Secondary')!;
    expect(eni.status).toBe('InUse');
    expect([eni.primaryIp, ...eni.secondaryIps]).toContain(ip);
    // The VPC delivers the pod IP to its ENI.
    sh(s.t.ext.ns, `ip neigh replace ${ip} lladdr ${eni.mac} dev vpc1 nud permanent`);
    sh(s.t.pods[0]!.ns, 'ping -c1 -W2 10.9.9.9');
    expect(
      ipj<{ priority: number; src?: string }[]>(s.t.host, 'rule show').filter((r) => r.src === ip && r.priority === 2048),
    ).toHaveLength(1);
    expect(s.pool.stats().used).toBe(1);

    // CHECK passes, then names what broke.
    const chk = await cni(s, 'CHECK', s.t.pods[0]!, 'web-0', version, { prevResult: add.out });
    expect(chk).toEqual({ code: 0, out: undefined });
    sh(s.t.host.ns, `ip rule del to ${ip}/32 lookup main pref 512`);
    const bad = await cni(s, 'CHECK', s.t.pods[0]!, 'web-0', version, { prevResult: add.out });
    expect(bad.out).toMatchObject({ code: 100, msg: `terway: CHECK: rule "to ${ip}/32 lookup main pref 512" is missing` });

    const del = await cni(s, 'DEL', s.t.pods[0]!, 'web-0', version);
    expect(del.code).toBe(0);
    expect(s.pool.stats().used).toBe(0);
    expect(ipj<{ src?: string }[]>(s.t.host, 'rule show').filter((r) => r.src === ip)).toEqual([]);
    expect((await cni(s, 'DEL', s.t.pods[0]!, 'web-0', version)).code).toBe(0);
  });
});

describe('terway CNI + terwayd', () => {
  it('a failed ADD is rolled back with ReleaseIP', async () => {
    s = await stack();
    sh(s.t.pods[0]!.ns, 'ip link add eth0 type veth peer name eth0x');
    const add = await cni(s, 'ADD', s.t.pods[0]!, 'broken');
    expect(add.code).toBe(1);
    expect(s.pool.stats().used).toBe(0);
    expect(s.pool.leaseOf('default/broken')).toBeUndefined();
    expect(ipj<{ priority: number }[]>(s.t.host, 'rule show').filter((r) => r.priority === 512 || r.priority === 2048)).toEqual([]);
  });

  it('pool exhausted and daemon down answer CNI code 11 (try again later); STATUS 50 while terwayd is down', async () => {
    s = await stack({ pods: 2, quota: { eniQuantity: 2, eniPrivateIpAddressQuantity: 1 } });
    expect((await cni(s, 'ADD', s.t.pods[0]!, 'a')).code).toBe(0);
    const full = await cni(s, 'ADD', s.t.pods[1]!, 'b');
    expect(full.code).toBe(1);
    expect(full.out).toMatchObject({ code: 11, msg: expect.stringMatching(/AllocIP: pool: no IP left/) });
    expect(await cni(s, 'STATUS', s.t.pods[1]!, 'b', '1.1.0')).toEqual({ code: 0, out: undefined });
    await s.server.stop();
    // STATUS tells the runtime that no ADD can succeed now (containerd then reports NetworkReady=false).
    const status = await cni(s, 'STATUS', s.t.pods[1]!, 'b', '1.1.0');
    expect(status.code).toBe(1);
    expect(status.out).toMatchObject({ code: 50, msg: 'terwayd is not reachable', details: expect.stringContaining(s.socket) });
    const down = await cni(s, 'ADD', s.t.pods[1]!, 'b');
    expect(down.out).toMatchObject({ code: 11 });
    // DEL with the daemon down: the veth goes, the answer says try again (for the release).
    const delDown = await cni(s, 'DEL', s.t.pods[0]!, 'a');
    expect(delDown.out).toMatchObject({ code: 11 });
    expect(ipj<{ ifname: string }[]>(s.t.host, 'link show').some((l) => l.ifname === hostVethName('default', 'a'))).toBe(false);
  });

  // kubelet re-creates a sandbox whose pause process died: ADD of the new sandbox B, then DEL of the old A
  // (A's netns, A's prevResult). That DEL must leave B's network and lease alone.
  it('a stale DEL of a re-created sandbox leaves the live sandbox wired and its IP leased', async () => {
    s = await stack({ pods: 2 });
    const [nsA, nsB] = [s.t.pods[0]!, s.t.pods[1]!];
    const addA = await cni(s, 'ADD', nsA, 'web-0', '1.0.0', {}, 'cid-a');
    expect(addA.code).toBe(0);
    const addB = await cni(s, 'ADD', nsB, 'web-0', '1.0.0', {}, 'cid-b');
    expect(addB.code).toBe(0);
    const ip = podIpOf(addB.out);
    expect(podIpOf(addA.out)).toBe(ip);

    expect(await cni(s, 'DEL', nsA, 'web-0', '1.0.0', { prevResult: addA.out }, 'cid-a')).toEqual({ code: 0, out: undefined });
    expect(ipj<{ ifname: string }[]>(nsA, 'link show').map((l) => l.ifname)).not.toContain('eth0');
    expect(ipj<{ ifname: string }[]>(nsB, 'link show').map((l) => l.ifname)).toContain('eth0');
    expect(ipj<{ ifname: string }[]>(s.t.host, 'link show').map((l) => l.ifname)).toContain(hostVethName('default', 'web-0'));
    expect(
      ipj<{ priority: number; src?: string; dst?: string }[]>(s.t.host, 'rule show').filter((r) => r.src === ip || r.dst === ip),
    ).toHaveLength(2);
    expect(s.pool.leaseOf('default/web-0')?.ip).toBe(ip);
    expect(await cni(s, 'CHECK', nsB, 'web-0', '1.0.0', { prevResult: addB.out }, 'cid-b')).toEqual({ code: 0, out: undefined });

    // The live sandbox's own DEL still takes everything down and frees the IP.
    expect((await cni(s, 'DEL', nsB, 'web-0', '1.0.0', { prevResult: addB.out }, 'cid-b')).code).toBe(0);
    expect(s.pool.leaseOf('default/web-0')).toBeUndefined();
    expect(ipj<{ src?: string; dst?: string }[]>(s.t.host, 'rule show').filter((r) => r.src === ip || r.dst === ip)).toEqual([]);
  });

  it('the pod source failing answers code 11 and takes no IP', async () => {
    s = await stack();
    s.pods.get = () => {
      throw new Error('apiserver: connection refused');
    };
    const r = await cni(s, 'ADD', s.t.pods[0]!, 'x');
    expect(r.out).toMatchObject({ code: 11, msg: expect.stringMatching(/read pod default\/x: apiserver: connection refused/) });
    expect(s.pool.stats().used).toBe(0);
  });

  it('bandwidth annotations reach tbf; a StatefulSet pod gets its IP back', async () => {
    s = await stack();
    s.pods.set('default/db-0', {
      annotations: { 'k8s.aliyun.com/ingress-bandwidth': '30M', 'k8s.aliyun.com/egress-bandwidth': '15M' },
      statefulSet: true,
    });
    const add = await cni(s, 'ADD', s.t.pods[0]!, 'db-0');
    expect(add.code).toBe(0);
    expect(sh(s.t.host.ns, `tc qdisc show dev ${hostVethName('default', 'db-0')}`)).toMatch(/tbf .*rate 30Mbit/);
    expect(sh(s.t.pods[0]!.ns, 'tc qdisc show dev eth0')).toMatch(/tbf .*rate 15Mbit/);
    const ip = podIpOf(add.out);
    expect((await cni(s, 'DEL', s.t.pods[0]!, 'db-0')).code).toBe(0);
    expect(s.pool.stats().reserved).toBe(1);
    // Another pod does not get the reserved IP; db-0 re-created does.
    const other = await cni(s, 'ADD', s.t.pods[1]!, 'other');
    expect(podIpOf(other.out)).not.toBe(ip);
    const again = await cni(s, 'ADD', s.t.pods[0]!, 'db-0');
    expect(podIpOf(again.out)).toBe(ip);
    // Leases are on disk.
    const stored = JSON.parse(fs.readFileSync(path.join(s.dir, 'pod.json'), 'utf8')) as { leases: { key: string; ip: string }[] };
    expect(stored.leases.map((l) => l.key).sort()).toEqual(['default/db-0', 'default/other']);
  });
});

describe('exclusive ENI mode (TypeVPCENI)', () => {
  it('ADD moves a fresh ENI into the pod; CHECK passes; DEL gives it back and the ENI is deleted', async () => {
    s = await stack({ pods: 1, exclusive: true });
    sh(s.t.host.ns, 'ip addr add 10.96.0.10/32 dev lo');
    const add = await cni(s, 'ADD', s.t.pods[0]!, 'db-0');
    expect(add.code).toBe(0);
    const ip = podIpOf(add.out);
    expect((add.out?.['ips'] as { address: string }[])[0]!.address).toBe(`${ip}/24`);
    const eni = [...s.api.enis.values()].find((e) => e.type === 'Secondary')!;
    expect(eni.primaryIp).toBe(ip);
    expect(ipj<{ address: string }[]>(s.t.pods[0]!, 'link show eth0')[0]!.address).toBe(eni.mac);
    sh(s.t.pods[0]!.ns, 'ping -c1 -W2 10.9.9.9'); // the VPC through the ENI itself
    sh(s.t.pods[0]!.ns, 'ping -c1 -W2 10.96.0.10'); // a Service through the host
    expect((await cni(s, 'CHECK', s.t.pods[0]!, 'db-0', '1.0.0', { prevResult: add.out })).code).toBe(0);
    expect((await cni(s, 'DEL', s.t.pods[0]!, 'db-0')).code).toBe(0);
    for (let i = 0; i < 200 && s.api.enis.has(eni.id); i++) await new Promise((r) => setTimeout(r, 20));
    expect(s.api.enis.has(eni.id)).toBe(false);
    expect(ipj<{ ifname: string }[]>(s.t.pods[0]!, 'link show').map((l) => l.ifname)).toEqual(['lo']);
    expect((await cni(s, 'DEL', s.t.pods[0]!, 'db-0')).code).toBe(0);
  });
});
