/**
 * The built `terwayd` and `terway` executables (dist/bin) in a "node" namespace: terwayd runs there
 * (`ip netns exec`) against the package's fake ECS/VPC OpenAPI, which this test process serves from
 * inside that namespace (socket bound there); ENIs appear as veths into an "ext" namespace standing
 * for the VPC when the fake reports them InUse. The terway binary is run the way a runtime runs it.
 * terwayd serves its Prometheus metrics inside the node (scraped with curl there). A second terwayd
 * runs `--daemon-mode VPC` (VPC route: addresses of the node's pod CIDR, no cloud) on its own socket.
 *
 * Every test starts from nothing: its own namespaces, fake cloud and terwayd (beforeEach), so no test
 * depends on what an earlier one did or left behind (a failed ADD test once left a lease that made the
 * metrics test read "used 1"). The "VPC" namespace sets the sysctls it relies on itself.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { openNetns, runInNetns } from '@cnikit/netlib';
import { FakeOpenApi } from '@cnikit/aliyun-emulator';
import { hostVethName } from '../../packages/terway/src/datapath/eniip-veth';
import { CNI_PATH, Netns, deleteAllNamespaces, describeWithPlugin, execPlugin, pluginPath, sleep, stopProcess } from '../lib';

// Needs both executables: skipped (or failing under CI) when either is missing.
const describeBoth = describeWithPlugin('terway', 'terwayd');

/** Inside the node namespace: no clash with anything on the machine. */
const METRICS_PORT = 19190;

describeBoth('terway + terwayd executables', () => {
  let node: Netns;
  let ext: Netns;
  let pod: Netns;
  let dir: string;
  let api: FakeOpenApi;
  let daemon: ChildProcess | undefined;
  let stderr = '';

  /**
   * The VPC's side of ENI n: its link up with rp_filter off. The node's ARP requests for the vSwitch
   * gateway carry a source address of another node device (10.6.0.1 on lo: the ENI has none), to which
   * this namespace has no route; a VPC gateway answers them all, while rp_filter 1 or 2 (copied from a
   * host that has it) would drop them and no pod could reach the VPC.
   */
  async function plugVpcSide(n: number): Promise<void> {
    await ext.execOk(['sh', '-c', `echo 0 > /proc/sys/net/ipv4/conf/all/rp_filter && echo 0 > /proc/sys/net/ipv4/conf/vpc${n}/rp_filter`]);
    await ext.ip('link', 'set', `vpc${n}`, 'up');
    if (n === 1) await ext.ip('addr', 'add', '192.168.0.253/24', 'dev', 'vpc1');
  }

  /** Waits for a line of a daemon's stderr; fails with what it wrote when it exits first. */
  async function waitListening(child: ChildProcess, out: () => string): Promise<void> {
    const deadline = Date.now() + 60_000;
    while (!out().includes('listening')) {
      if (child.exitCode !== null || Date.now() > deadline) throw new Error(`terwayd did not start: ${out()}`);
      await sleep(50);
    }
  }

  async function stopDaemon(child: ChildProcess | undefined): Promise<void> {
    if (child) await stopProcess(child);
  }

  beforeEach(async () => {
    stderr = '';
    node = await Netns.create('twnode');
    ext = await Netns.create('twext');
    pod = await Netns.create('twpod');
    await ext.ip('addr', 'add', '10.9.9.9/32', 'dev', 'lo');
    await node.ip('addr', 'add', '10.6.0.1/32', 'dev', 'lo');
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cnikit-e2e-terway-'));
    let n = 0;
    api = new FakeOpenApi({
      attachDelayMs: 30,
      onAttached: async (eni) => {
        const i = ++n;
        await node.ip('link', 'add', `eni${i}`, 'address', eni.mac, 'type', 'veth', 'peer', 'name', `vpc${i}`, 'netns', ext.name);
        await plugVpcSide(i);
      },
    });
    api.addVSwitch('vsw-a', 'cn-hangzhou-i', '192.168.0.0/24');
    api.addInstanceType('ecs.g7.large', { eniQuantity: 3, eniPrivateIpAddressQuantity: 10 });
    api.addInstance('i-e2e', 'ecs.g7.large', 'vsw-a');
    const nodeNs = openNetns(node.path);
    let endpoint: string;
    try {
      endpoint = runInNetns(nodeNs, () => api.listenSync());
    } finally {
      nodeNs.close();
    }
    fs.writeFileSync(
      path.join(dir, 'eni.json'),
      JSON.stringify({ max_pool_size: 5, min_pool_size: 1, security_group: 'sg-1', access_key: 'LTAI-test', access_secret: 'test-secret' }),
    );
    const d = spawn(
      'ip',
      [
        'netns',
        'exec',
        node.name,
        pluginPath('terwayd'),
        '--config',
        path.join(dir, 'eni.json'),
        '--socket',
        path.join(dir, 'eni.socket'),
        '--state',
        path.join(dir, 'pod.json'),
        '--metadata',
        `http://${endpoint}`,
        '--ecs-endpoint',
        endpoint,
        '--vpc-endpoint',
        endpoint,
        '--protocol',
        'http',
        '--log-file',
        path.join(dir, 'terwayd.log'),
        '--metrics-address',
        `127.0.0.1:${METRICS_PORT}`,
      ],
      { stdio: ['ignore', 'ignore', 'pipe'] },
    );
    daemon = d;
    d.stderr!.on('data', (c: Buffer) => (stderr += c.toString()));
    await waitListening(d, () => stderr);
  });

  afterEach(async () => {
    await stopDaemon(daemon);
    daemon = undefined;
    await api?.close();
    await deleteAllNamespaces();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  const conf = (socket: string, cniVersion = '1.0.0'): object => ({ cniVersion, name: 'terway', type: 'terway', socket });
  const env = (cmd: string, containerId = 'e2e-terway-0001', netns = pod): Record<string, string> => ({
    CNI_COMMAND: cmd,
    CNI_CONTAINERID: containerId,
    CNI_NETNS: netns.path,
    CNI_IFNAME: 'eth0',
    CNI_PATH,
    CNI_ARGS: `IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0;K8S_POD_INFRA_CONTAINER_ID=${containerId}`,
  });
  const ipOf = (json: unknown): string => (json as { ips: { address: string }[] }).ips[0]!.address.split('/')[0]!;

  /** /metrics of the node's terwayd, one value per series. */
  async function metrics(): Promise<(series: string) => number | undefined> {
    const text = await node.execOk(['curl', '-sf', `http://127.0.0.1:${METRICS_PORT}/metrics`]);
    return (series) => {
      const line = text.split('\n').find((l) => l.startsWith(`${series} `));
      return line === undefined ? undefined : Number(line.slice(series.length + 1));
    };
  }

  test('ADD wires an ENI IP the pod reaches the VPC with; CHECK passes; DEL removes it; ADD and DEL twice', async () => {
    const socket = path.join(dir, 'eni.socket');
    const add = await execPlugin(pluginPath('terway'), env('ADD'), conf(socket), node);
    expect(add.code).toBe(0);
    const ip = ipOf(add.json);
    expect(ip).toMatch(/^192\.168\.0\./);
    const eni = [...api.enis.values()].find((e) => e.type === 'Secondary' && [e.primaryIp, ...e.secondaryIps].includes(ip))!;
    expect(eni.status).toBe('InUse');
    const rules = await node.ipJson<{ priority: number; src?: string; dst?: string }>('rule', 'show');
    expect(rules.filter((r) => (r.priority === 512 && r.dst === ip) || (r.priority === 2048 && r.src === ip))).toHaveLength(2);
    await ext.ip('neigh', 'replace', ip, 'lladdr', eni.mac, 'dev', 'vpc1', 'nud', 'permanent');
    await pod.execOk(['ping', '-c1', '-W2', '10.9.9.9']);
    const chk = await execPlugin(pluginPath('terway'), env('CHECK'), { ...conf(socket), prevResult: add.json }, node);
    expect(chk.code).toBe(0);
    const again = await execPlugin(pluginPath('terway'), env('ADD'), conf(socket), node);
    expect(again.code).toBe(0);
    expect((again.json as { ips: { address: string }[] }).ips[0]!.address).toBe(`${ip}/32`);

    for (let i = 0; i < 2; i++) {
      const del = await execPlugin(pluginPath('terway'), env('DEL'), conf(socket), node);
      expect(del.code).toBe(0);
    }
    const links = await node.ipJson<{ ifname: string }>('link', 'show');
    expect(links.some((l) => l.ifname === hostVethName('default', 'web-0'))).toBe(false);
    const stored = JSON.parse(fs.readFileSync(path.join(dir, 'pod.json'), 'utf8')) as { leases: unknown[] };
    expect(stored.leases).toEqual([]);
  });

  test('terwayd serves Prometheus metrics: pool gauges, OpenAPI and RPC latency, following an ADD and a DEL', async () => {
    const socket = path.join(dir, 'eni.socket');
    const before = await metrics();
    expect(before('terway_resource_pool_max_idle_count{name="eniip"}')).toBe(5);
    expect(before('terway_resource_pool_min_idle_count{name="eniip"}')).toBe(1);
    expect(before('terway_resource_pool_used_count{name="eniip"}')).toBe(0);
    expect((await execPlugin(pluginPath('terway'), env('ADD'), conf(socket), node)).code).toBe(0);
    const added = await metrics();
    expect(added('terway_resource_pool_used_count{name="eniip"}')).toBe(1);
    expect(added('terway_rpc_latency_count{method="AllocIP",error=""}')).toBe(1);
    expect(added('terway_aliyun_openapi_latency_count{api="CreateNetworkInterface",error=""}')).toBe(api.count('CreateNetworkInterface'));
    expect((await execPlugin(pluginPath('terway'), env('DEL'), conf(socket), node)).code).toBe(0);
    const deleted = await metrics();
    expect(deleted('terway_resource_pool_used_count{name="eniip"}')).toBe(0);
    expect(deleted('terway_rpc_latency_count{method="ReleaseIP",error=""}')).toBe(1);
  });

  test('a stale DEL (the older sandbox of a re-created pod) leaves the live sandbox wired and leased', async () => {
    const socket = path.join(dir, 'eni.socket');
    const podB = await Netns.create('twpodb');
    const addA = await execPlugin(pluginPath('terway'), env('ADD', 'e2e-sandbox-a'), conf(socket), node);
    const addB = await execPlugin(pluginPath('terway'), env('ADD', 'e2e-sandbox-b', podB), conf(socket), node);
    expect([addA.code, addB.code]).toEqual([0, 0]);
    expect(ipOf(addB.json)).toBe(ipOf(addA.json));
    const delA = await execPlugin(pluginPath('terway'), env('DEL', 'e2e-sandbox-a'), { ...conf(socket), prevResult: addA.json }, node);
    expect(delA.code).toBe(0);
    expect((await node.ipJson<{ ifname: string }>('link', 'show')).map((l) => l.ifname)).toContain(hostVethName('default', 'web-0'));
    const chkB = await execPlugin(
      pluginPath('terway'),
      env('CHECK', 'e2e-sandbox-b', podB),
      { ...conf(socket), prevResult: addB.json },
      node,
    );
    expect(chkB.code).toBe(0);
    const stored = JSON.parse(fs.readFileSync(path.join(dir, 'pod.json'), 'utf8')) as { leases: { containerId: string }[] };
    expect(stored.leases).toEqual([expect.objectContaining({ containerId: 'e2e-sandbox-b' })]);
  });

  test('STATUS (CNI 1.1.0): success while terwayd answers, code 50 once it is gone', async () => {
    const socket = path.join(dir, 'eni.socket');
    const up = await execPlugin(pluginPath('terway'), { CNI_COMMAND: 'STATUS', CNI_PATH }, conf(socket, '1.1.0'), node);
    expect(up.code).toBe(0);
    await stopDaemon(daemon);
    const down = await execPlugin(pluginPath('terway'), { CNI_COMMAND: 'STATUS', CNI_PATH }, conf(socket, '1.1.0'), node);
    expect(down.code).toBe(1);
    expect(down.json).toMatchObject({ code: 50, msg: expect.stringMatching(/^terway: terwayd (is not running|does not answer)/) });
  });

  test('--daemon-mode VPC: the pod gets an address of the pod CIDR, the node reaches it; DEL twice', async () => {
    const socket = path.join(dir, 'vpc.socket');
    let err = '';
    const vpcd = spawn(
      'ip',
      [
        'netns',
        'exec',
        node.name,
        pluginPath('terwayd'),
        '--daemon-mode',
        'VPC',
        '--pod-cidr',
        '10.244.1.0/24',
        '--config',
        path.join(dir, 'none.json'),
        '--socket',
        socket,
        '--state',
        path.join(dir, 'vpc.json'),
        '--log-file',
        path.join(dir, 'terwayd-vpc.log'),
      ],
      { stdio: ['ignore', 'ignore', 'pipe'] },
    );
    vpcd.stderr!.on('data', (c: Buffer) => (err += c.toString()));
    try {
      await waitListening(vpcd, () => err);
      expect(err).toMatch(/VPC route mode \(10\.244\.1\.0\/24\), listening/);
      const pod2 = await Netns.create('twvpod');
      const env2 = (cmd: string): Record<string, string> => ({
        ...env(cmd),
        CNI_CONTAINERID: 'e2e-terway-vpc1',
        CNI_NETNS: pod2.path,
        CNI_ARGS: 'IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=vpc-0',
      });
      const add = await execPlugin(pluginPath('terway'), env2('ADD'), conf(socket), node);
      expect(add.code).toBe(0);
      const ip = ipOf(add.json);
      expect(ip).toMatch(/^10\.244\.1\.\d+$/);
      await node.execOk(['ping', '-c1', '-W2', ip]);
      const chk = await execPlugin(pluginPath('terway'), env2('CHECK'), { ...conf(socket), prevResult: add.json }, node);
      expect(chk.code).toBe(0);
      for (let i = 0; i < 2; i++) expect((await execPlugin(pluginPath('terway'), env2('DEL'), conf(socket), node)).code).toBe(0);
      const links = await node.ipJson<{ ifname: string }>('link', 'show');
      expect(links.some((l) => l.ifname === hostVethName('default', 'vpc-0'))).toBe(false);
    } finally {
      await stopDaemon(vpcd);
    }
  });

  test('daemon unreachable: code 11', async () => {
    const r = await execPlugin(pluginPath('terway'), env('ADD'), conf(path.join(dir, 'nobody.socket')), node);
    expect(r.code).toBe(1);
    expect((r.json as { code: number }).code).toBe(11);
  });
});
