/**
 * The whole stack in namespaces: the terway CNI binary (in-process, the test
 * "host" netns as its host) -> gRPC on a UNIX socket -> terwayd -> the pool ->
 * the OpenAPI client -> the fake OpenAPI, whose attached ENIs appear as veths
 * into an "ext" netns standing for the VPC.
 */
import * as fs from 'node:fs';
import * as net from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import { runPlugin, type PluginHandlers } from '@cnikit/netlib';
import { sh, useHostNetns } from '@cnikit/netlib-testing';
import type { FakeOpenApi } from '@cnikit/aliyun-emulator';
import { FakeClock } from '@cnikit/terway-testing';
import { realClock, type Clock } from '../src/clock';
import * as plugin from '../src/cni/plugin';
import { TerwayDaemon, type PodMeta } from '../src/daemon/daemon';
import { ExclusiveEniAllocator } from '../src/daemon/exclusive';
import { TerwayServer } from '../src/daemon/server';
import { LeaseStore } from '../src/daemon/store';
import { hostVethName } from '../src/datapath/eniip-veth';
import { EniIpPool, parsePoolConfig } from '../src/pool';
import { ipj, makeTopo, type TestNs, type Topo } from './datapath-helpers';
import { cloudFor, startNodeApi, terwayCni } from './support';

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
  opts: { pods?: number; quota?: { eniQuantity: number; eniPrivateIpAddressQuantity: number }; exclusive?: boolean; clock?: Clock } = {},
): Promise<Stack> {
  const t = makeTopo(opts.pods ?? 2);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'terway-'));
  let n = 0;
  const api = await startNodeApi(
    {
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
    },
    {
      vswitches: { 'vsw-a': '192.168.0.0/24' },
      instanceType: 'ecs.test',
      quota: opts.quota ?? { eniQuantity: 3, eniPrivateIpAddressQuantity: 10 },
    },
  );
  const cloud = cloudFor(api);
  const pool = new EniIpPool({
    config: parsePoolConfig({ max_pool_size: 5, security_groups: ['sg-1'], vswitches: { 'cn-hangzhou-i': ['vsw-a'] } }),
    quota: await cloud.instanceQuota('ecs.test'),
    cloud,
    clock: opts.clock ?? realClock,
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

/** One CNI call as a runtime makes it; the sandbox's container ID is `ctr-<name>` unless given. */
async function cni(
  s: Stack,
  command: 'ADD' | 'DEL' | 'CHECK',
  pod: TestNs,
  name: string,
  version = '1.0.0',
  extra: Record<string, unknown> = {},
  containerId = `ctr-${name}`,
): Promise<{ code: number; out: Record<string, unknown> | undefined }> {
  return terwayCni({ hostNs: s.t.host.ns, socket: s.socket, command, pod, name, version, extra, containerId });
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

  it('pool exhausted and daemon down answer CNI code 11 (try again later)', async () => {
    s = await stack({ pods: 2, quota: { eniQuantity: 2, eniPrivateIpAddressQuantity: 1 } });
    expect((await cni(s, 'ADD', s.t.pods[0]!, 'a')).code).toBe(0);
    const full = await cni(s, 'ADD', s.t.pods[1]!, 'b');
    expect(full.code).toBe(1);
    expect(full.out).toMatchObject({ code: 11, msg: expect.stringMatching(/AllocIP: pool: no IP left/) });
    await s.server.stop();
    const down = await cni(s, 'ADD', s.t.pods[1]!, 'b');
    expect(down.out).toMatchObject({ code: 11 });
    // DEL with the daemon down: the veth goes, the answer says try again (for the release).
    const delDown = await cni(s, 'DEL', s.t.pods[0]!, 'a');
    expect(delDown.out).toMatchObject({ code: 11 });
    expect(ipj<{ ifname: string }[]>(s.t.host, 'link show').some((l) => l.ifname === hostVethName('default', 'a'))).toBe(false);
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

describe("a re-created sandbox: ADD of sandbox A, ADD of sandbox B (same pod, same IP), then the runtime's DEL of A", () => {
  interface Rule {
    priority: number;
    src?: string;
    dst?: string;
  }
  it("the stale DEL clears only A's netns: B keeps its host veth, rules, /32 route, eth0, traffic and lease; CHECK of B passes, of A fails", async () => {
    s = await stack({ pods: 2 });
    const [nsA, nsB] = s.t.pods as [TestNs, TestNs];
    const addA = await cni(s, 'ADD', nsA, 'web-0', '1.0.0', {}, 'cid-a');
    expect(addA.code).toBe(0);
    const addB = await cni(s, 'ADD', nsB, 'web-0', '1.0.0', {}, 'cid-b');
    expect(addB.code).toBe(0);
    const ip = podIpOf(addB.out);
    expect(podIpOf(addA.out)).toBe(ip);
    const veth = hostVethName('default', 'web-0');

    const delA = await cni(s, 'DEL', nsA, 'web-0', '1.0.0', { prevResult: addA.out }, 'cid-a');
    expect(delA).toEqual({ code: 0, out: undefined });
    expect(ipj<{ ifname: string }[]>(nsA, 'link show').map((l) => l.ifname)).toEqual(['lo']);
    // B is untouched: what terwayd's GC looks at (the host veth) and what carries its traffic.
    expect(ipj<{ ifname: string }[]>(s.t.host, 'link show').map((l) => l.ifname)).toContain(veth);
    const rules = ipj<Rule[]>(s.t.host, 'rule show');
    expect(rules.filter((r) => (r.priority === 512 && r.dst === ip) || (r.priority === 2048 && r.src === ip))).toHaveLength(2);
    expect(ipj<{ dst: string; dev: string }[]>(s.t.host, `route show ${ip}/32`)).toEqual([expect.objectContaining({ dev: veth })]);
    expect(ipj<{ ifname: string }[]>(nsB, 'link show').map((l) => l.ifname)).toEqual(['lo', 'eth0']);
    const eni = [...s.api.enis.values()].find((e) => [e.primaryIp, ...e.secondaryIps].includes(ip))!;
    sh(s.t.ext.ns, `ip neigh replace ${ip} lladdr ${eni.mac} dev vpc1 nud permanent`);
    sh(nsB.ns, 'ping -c1 -W2 10.9.9.9');
    expect(s.pool.leaseOf('default/web-0')?.ip).toBe(ip);
    const stored = JSON.parse(fs.readFileSync(path.join(s.dir, 'pod.json'), 'utf8')) as { leases: { key: string; containerId: string }[] };
    expect(stored.leases).toEqual([expect.objectContaining({ key: 'default/web-0', containerId: 'cid-b' })]);
    expect(await cni(s, 'CHECK', nsB, 'web-0', '1.0.0', { prevResult: addB.out }, 'cid-b')).toEqual({ code: 0, out: undefined });
    const chkA = await cni(s, 'CHECK', nsA, 'web-0', '1.0.0', { prevResult: addA.out }, 'cid-a');
    expect(chkA.out).toMatchObject({ code: 100, msg: 'terway: CHECK: the IP of default/web-0 is held by sandbox cid-b, not cid-a' });

    // The live sandbox's own DEL still takes everything, and releases.
    expect((await cni(s, 'DEL', nsB, 'web-0', '1.0.0', { prevResult: addB.out }, 'cid-b')).code).toBe(0);
    expect(s.pool.leaseOf('default/web-0')).toBeUndefined();
    expect(ipj<Rule[]>(s.t.host, 'rule show').filter((r) => r.src === ip || r.dst === ip)).toEqual([]);
    expect(ipj<{ ifname: string }[]>(s.t.host, 'link show').map((l) => l.ifname)).not.toContain(veth);
  });
});

describe('a DEL while terwayd is down', () => {
  it('cannot tell a stale sandbox from the live one: it clears only its own netns and answers 11', async () => {
    s = await stack({ pods: 2 });
    const [nsA, nsB] = s.t.pods as [TestNs, TestNs];
    const addA = await cni(s, 'ADD', nsA, 'web-0', '1.0.0', {}, 'cid-a');
    const addB = await cni(s, 'ADD', nsB, 'web-0', '1.0.0', {}, 'cid-b');
    expect([addA.code, addB.code]).toEqual([0, 0]);
    const ip = podIpOf(addB.out);
    await s.server.stop();
    const delA = await cni(s, 'DEL', nsA, 'web-0', '1.0.0', { prevResult: addA.out }, 'cid-a');
    expect(delA.out).toMatchObject({ code: 11 });
    expect(ipj<{ ifname: string }[]>(s.t.host, 'link show').map((l) => l.ifname)).toContain(hostVethName('default', 'web-0'));
    expect(
      ipj<{ priority: number; src?: string; dst?: string }[]>(s.t.host, 'rule show').filter((r) => r.src === ip || r.dst === ip),
    ).toHaveLength(2);
    expect(ipj<{ ifname: string }[]>(nsB, 'link show').map((l) => l.ifname)).toEqual(['lo', 'eth0']);
  });
});

describe('STATUS (CNI 1.1.0): the node is ready for pods only while terwayd answers', () => {
  async function status(socket: string): Promise<{ code: number; out: Record<string, unknown> | undefined }> {
    const conf = { cniVersion: '1.1.0', name: 'terway', type: 'terway', socket };
    const r = await runPlugin(
      plugin as unknown as PluginHandlers,
      { about: 'terway test' },
      { env: { CNI_COMMAND: 'STATUS', CNI_PATH: '/opt/cni/bin' }, stdin: JSON.stringify(conf) },
    );
    return { code: r.exitCode, out: r.stdout.trim() ? (JSON.parse(r.stdout) as Record<string, unknown>) : undefined };
  }

  it('succeeds with terwayd up; 50 with its socket gone, with nobody answering on it, and with terwayd stopped', async () => {
    s = await stack({ pods: 0 });
    expect(await status(s.socket)).toEqual({ code: 0, out: undefined });

    const missing = await status(path.join(s.dir, 'none.socket'));
    expect(missing.code).toBe(1);
    expect(missing.out).toMatchObject({ code: 50, msg: `terway: terwayd is not running: no socket at ${path.join(s.dir, 'none.socket')}` });

    // A process that holds the socket but never answers (hung terwayd): 50 after the STATUS timeout.
    const mute = path.join(s.dir, 'mute.socket');
    const held: net.Socket[] = [];
    const srv = net.createServer((c) => void held.push(c));
    await new Promise<void>((r) => srv.listen(mute, r));
    try {
      const hung = await status(mute);
      expect(hung.out).toMatchObject({
        code: 50,
        msg: `terway: terwayd does not answer on ${mute}`,
        details: expect.stringMatching(/GetIPInfo/),
      });
    } finally {
      for (const c of held) c.destroy();
      await new Promise((r) => srv.close(r));
    }

    await s.server.stop();
    const down = await status(s.socket);
    expect(down.out).toMatchObject({ code: 50 });
  });

  it("50 while no address can be had: nothing idle and the pool backing off from the cloud's refusal; 0 once it may ask again", async () => {
    const clock = new FakeClock(Date.now());
    s = await stack({ pods: 1, clock });
    s.api.inject('CreateNetworkInterface', {
      code: 'Forbidden.RAM',
      status: 403,
      message: 'User not authorized to operate on the specified resource.',
    });
    const pod = s.t.pods[0]!;
    expect((await cni(s, 'ADD', pod, 'web-0')).out).toMatchObject({ code: 11 });
    expect(await status(s.socket)).toMatchObject({
      code: 1,
      out: { code: 50, msg: expect.stringMatching(/^terway: no address can be had now: create ENI in vsw-a failed: .*Forbidden\.RAM/) },
    });
    // the back-off over (the pool's clock), STATUS lets the runtime try again, and the ADD succeeds
    await clock.advance(1100);
    expect(await status(s.socket)).toEqual({ code: 0, out: undefined });
    expect((await cni(s, 'ADD', pod, 'web-0')).code).toBe(0);
    expect(await status(s.socket)).toEqual({ code: 0, out: undefined });
  });
});

describe('GC (CNI 1.1.0): leases of sandboxes the runtime no longer lists go as their DEL would take them', () => {
  async function gc(socket: string, valid?: { containerID: string; ifname: string }[]): Promise<{ code: number; out: unknown }> {
    const conf = { cniVersion: '1.1.0', name: 'terway', type: 'terway', socket, ...(valid ? { 'cni.dev/valid-attachments': valid } : {}) };
    const r = await useHostNetns(s.t.host.ns, () =>
      runPlugin(
        plugin as unknown as PluginHandlers,
        { about: 'terway test' },
        { env: { CNI_COMMAND: 'GC', CNI_PATH: '/opt/cni/bin' }, stdin: JSON.stringify(conf) },
      ),
    );
    return { code: r.exitCode, out: r.stdout.trim() ? JSON.parse(r.stdout) : undefined };
  }
  const links = (): string[] => ipj<{ ifname: string }[]>(s.t.host, 'link show').map((l) => l.ifname);
  const rulesOf = (ip: string): unknown[] =>
    ipj<{ src?: string; dst?: string }[]>(s.t.host, 'rule show').filter((r) => r.src === ip || r.dst === ip);

  it('keeps every listed sandbox, takes the host veth, rules and lease of the others; a GC without the list is code 7', async () => {
    s = await stack({ pods: 3 });
    const [p0, p1, p2] = s.t.pods as [TestNs, TestNs, TestNs];
    const adds: Awaited<ReturnType<typeof cni>>[] = [];
    for (const [pod, name] of [
      [p0, 'live'],
      [p1, 'gone'],
      [p2, 'killed'],
    ] as const)
      adds.push(await cni(s, 'ADD', pod, name));
    expect(adds.map((x) => x.code)).toEqual([0, 0, 0]);
    const ips = adds.map((x) => podIpOf(x.out));
    const [liveIp, goneIp, killedIp] = ips as [string, string, string];
    expect(await gc(s.socket)).toMatchObject({ code: 1, out: { code: 7, msg: expect.stringMatching(/valid-attachments/) } });
    expect(s.pool.stats().used).toBe(3);

    expect(await gc(s.socket, [{ containerID: 'ctr-live', ifname: 'eth0' }])).toEqual({ code: 0, out: undefined });
    expect(s.pool.leases().map((l) => l.key)).toEqual(['default/live']);
    expect(links()).toContain(hostVethName('default', 'live'));
    expect(links()).not.toContain(hostVethName('default', 'gone'));
    expect(links()).not.toContain(hostVethName('default', 'killed'));
    expect(rulesOf(liveIp)).toHaveLength(2);
    expect([...rulesOf(goneIp), ...rulesOf(killedIp)]).toEqual([]);
    // the pods' netns lose their interface with the host end; the one kept still has its network
    expect(ipj<{ ifname: string }[]>(p1, 'link show').map((l) => l.ifname)).toEqual(['lo']);
    expect((await cni(s, 'CHECK', p0, 'live', '1.0.0', { prevResult: adds[0]!.out })).code).toBe(0);
    const stored = JSON.parse(fs.readFileSync(path.join(s.dir, 'pod.json'), 'utf8')) as { leases: { key: string }[] };
    expect(stored.leases.map((l) => l.key)).toEqual(['default/live']);
    // nothing left to collect: a second GC changes nothing
    expect(await gc(s.socket, [{ containerID: 'ctr-live', ifname: 'eth0' }])).toEqual({ code: 0, out: undefined });
    expect(s.pool.leases().map((l) => l.key)).toEqual(['default/live']);
  });

  it("a pod re-created since: its new sandbox is listed, the old one's lease is the new one's and stays", async () => {
    s = await stack({ pods: 2 });
    const [nsA, nsB] = s.t.pods as [TestNs, TestNs];
    expect((await cni(s, 'ADD', nsA, 'web-0', '1.0.0', {}, 'cid-a')).code).toBe(0);
    const addB = await cni(s, 'ADD', nsB, 'web-0', '1.0.0', {}, 'cid-b');
    expect(addB.code).toBe(0);
    expect(await gc(s.socket, [{ containerID: 'cid-b', ifname: 'eth0' }])).toEqual({ code: 0, out: undefined });
    expect(s.pool.leases().map((l) => l.key)).toEqual(['default/web-0']);
    expect((await cni(s, 'CHECK', nsB, 'web-0', '1.0.0', { prevResult: addB.out }, 'cid-b')).code).toBe(0);
  });

  it('terwayd down: 11, nothing collected', async () => {
    s = await stack({ pods: 1 });
    expect((await cni(s, 'ADD', s.t.pods[0]!, 'web-0')).code).toBe(0);
    await s.server.stop();
    expect(await gc(s.socket, [])).toMatchObject({ code: 1, out: { code: 11 } });
    expect(links()).toContain(hostVethName('default', 'web-0'));
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
