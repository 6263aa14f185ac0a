/**
 * gcp-ipam (dist/bin/gcp-ipam, the built single-file executable) as the `ipam` of Debian's `ptp`, driven by
 * cnitool (libcni) inside a node namespace, against a real kube-apiserver + etcd and the fake GCE compute API.
 * The node namespace reaches both servers on 127.0.0.1 through forwarders (TCP in the node namespace -> UNIX
 * socket -> TCP here), so nothing is added to the machine's own namespace.
 * Checks: the pod gets the pool IP, gateway = pool base + 1, default route; the alias lands on the node's VM;
 * the IPAllocation is visible with kubectl; CHECK passes; DEL frees IP and alias; a second DEL succeeds.
 */
import * as fs from 'node:fs';
import * as net from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import { execFileSync, spawn } from 'node:child_process';
import { eventually, startCluster, stopCluster, type ClusterInfo } from '@cnikit/kube-testing';
import { FakeGce } from '@cnikit/gce-emulator';
import { CniDirs, cnitool, cnitoolOk, deleteAllNamespaces, describeWithPlugin, Netns, podmanEnv, REPO_ROOT, writeConflist } from '../lib';

const describeGcp = describeWithPlugin('gcp-ipam');
const ZONE = 'europe-west1-b';
const NET = 'gcp-ptp';

/**
 * Makes 127.0.0.1:port of this namespace reachable as 127.0.0.1:port inside `nsName`: a UNIX socket (which
 * does not care about network namespaces) forwards to the TCP port here, and a small Node process started in
 * the namespace listens on the TCP port there and forwards to the UNIX socket.
 */
async function forwardInto(nsName: string, port: number, dir: string): Promise<{ close(): void }> {
  const sock = path.join(dir, `fwd-${port}.sock`);
  const server = net.createServer((c) => {
    const up = net.connect(port, '127.0.0.1');
    c.pipe(up).pipe(c);
    c.on('error', () => up.destroy());
    up.on('error', () => c.destroy());
  });
  await new Promise<void>((resolve) => server.listen(sock, resolve));
  const script = `const net=require('net');const [port,sock]=process.argv.slice(1);net.createServer((c)=>{const u=net.connect(sock);c.pipe(u).pipe(c);c.on('error',()=>u.destroy());u.on('error',()=>c.destroy());}).listen(Number(port),'127.0.0.1',()=>process.stdout.write('ready\\n'));`;
  const child = spawn('ip', ['netns', 'exec', nsName, process.execPath, '-e', script, String(port), sock], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  await new Promise<void>((resolve, reject) => {
    child.stdout!.once('data', () => resolve());
    child.once('exit', (code) => reject(new Error(`forwarder for ${port} exited ${code}`)));
  });
  return {
    close: () => {
      child.kill('SIGKILL');
      server.close();
    },
  };
}

describeGcp('gcp-ipam under ptp via cnitool, real API server, fake GCE', () => {
  let info: ClusterInfo;
  let fake: FakeGce;
  let node: Netns;
  let pod: Netns;
  let dirs: CniDirs;
  let stateDir: string;
  const servers: { close(): void }[] = [];
  const kubectl = (...args: string[]): string => execFileSync('kubectl', ['--kubeconfig', info.kubeconfig, ...args], { encoding: 'utf8' });

  beforeAll(async () => {
    info = await startCluster({ stateDir: fs.mkdtempSync(path.join(os.tmpdir(), 'cnikit-e2e-gcp-')), garbageCollector: false });
    fake = new FakeGce({ opDurationMs: 300 });
    await fake.start();
    fake.addInstance(ZONE, 'node-a');
    kubectl('apply', '-f', path.join(REPO_ROOT, 'packages/gcp-ipam/config/crds.yaml'));
    kubectl(
      'wait',
      '--for=condition=Established',
      'crd/ippools.ipam.gcp-cni.cast.ai',
      'crd/ipallocations.ipam.gcp-cni.cast.ai',
      '--timeout=30s',
    );
    const poolYaml = path.join(info.stateDir, 'pool.yaml');
    fs.writeFileSync(
      poolYaml,
      [
        'apiVersion: ipam.gcp-cni.cast.ai/v1alpha1',
        'kind: IPPool',
        'metadata:',
        '  name: ippool-e2e',
        'spec:',
        '  cidr: 10.116.0.0/24',
        '  subnet: projects/test-project/regions/europe-west1/subnetworks/default',
        '  secondaryRangeName: live',
        '',
      ].join('\n'),
    );
    // the new CRD's storage can answer 429 for a moment
    await eventually(
      'the IPPool applied',
      () => {
        kubectl('apply', '-f', poolYaml);
        return true;
      },
      10_000,
      250,
    );
    node = await Netns.create('node');
    pod = await Netns.create('pod');
    servers.push(
      await forwardInto(node.name, Number(new URL(info.server).port), info.stateDir),
      await forwardInto(node.name, Number(new URL(fake.url).port), info.stateDir),
    );
    dirs = new CniDirs();
    stateDir = fs.mkdtempSync(path.join(os.tmpdir(), 'cnikit-e2e-gcp-state-'));
    dirs.writeConflist(conflist());
  }, 120_000);

  afterAll(async () => {
    for (const s of servers) s.close();
    await deleteAllNamespaces();
    dirs?.remove();
    await fake?.stop();
    if (info) await stopCluster(info);
    if (stateDir) fs.rmSync(stateDir, { recursive: true, force: true });
  });

  const conflist = () => ({
    cniVersion: '1.0.0',
    name: NET,
    plugins: [
      {
        type: 'ptp',
        ipMasq: false,
        mtu: 1460,
        ipam: {
          type: 'gcp-ipam',
          kubeconfig: info.kubeconfig,
          pool: 'ippool-e2e',
          project: 'test-project',
          zone: ZONE,
          instance: 'node-a',
          nodeName: 'node-a',
          computeEndpoint: fake.computeEndpoint,
          stateDir,
        },
      },
    ],
  });

  const tool = (cmd: Parameters<typeof cnitool>[0]) =>
    cnitool(cmd, NET, pod.path, { node, confDir: dirs.confDir, args: 'IgnoreUnknown=1' });

  test('ADD gives the pod a pool IP with gateway and default route, attaches the alias, records the allocation', async () => {
    const r = await cnitoolOk('add', NET, pod.path, { node, confDir: dirs.confDir });
    const ipc = r.json.ips[0];
    expect(ipc.address).toMatch(/^10\.116\.0\.\d+\/24$/);
    expect(ipc.gateway).toBe('10.116.0.1');
    const ip = ipc.address.split('/')[0];
    const addrs = await pod.ipJson<{ ifname: string; addr_info: { local: string }[] }>('addr', 'show', 'dev', 'eth0');
    expect(addrs[0]!.addr_info.map((a) => a.local)).toContain(ip);
    const routes = await pod.ipJson<{ dst: string; gateway?: string }>('route', 'show');
    expect(routes).toContainEqual(expect.objectContaining({ dst: 'default', gateway: '10.116.0.1' }));
    expect(fake.aliasesOf(ZONE, 'node-a')).toEqual([`${ip}/32`]);
    // the node reaches the pod over ptp's host route
    await node.execOk(['ping', '-c', '1', '-W', '2', ip]);
    const shown = kubectl('get', 'ipallocations', '-l', 'ipam.gcp-cni.cast.ai/node=node-a', '--no-headers');
    expect(shown).toContain(ip);
    expect(shown).toContain('Allocated');
    expect((await tool('check')).code).toBe(0);
  });

  test('DEL frees the IP and detaches the alias; a second DEL succeeds', async () => {
    expect((await tool('del')).code).toBe(0);
    expect(fake.aliasesOf(ZONE, 'node-a')).toEqual([]);
    expect(kubectl('get', 'ipallocations', '--no-headers', '-o', 'name').trim()).toBe('');
    expect((await tool('del')).code).toBe(0);
  });

  test('podman (libcni) runs a container on ptp + gcp-ipam: pool IP, default route, gateway reachable; disconnect frees it', async () => {
    const env = await podmanEnv();
    writeConflist(env.confDir, conflist());
    const c = await env.start([NET], { node });
    let removed = false;
    try {
      const addr = await c.execOk(['ip', '-4', '-o', 'addr', 'show', 'eth0']);
      const ip = /inet (10\.116\.0\.\d+)\/24/.exec(addr)![1]!;
      expect(await c.execOk(['ip', 'route', 'show', 'default'])).toMatch(/via 10\.116\.0\.1 dev eth0/);
      await c.execOk(['ping', '-c', '1', '-W', '2', '10.116.0.1']);
      expect(fake.aliasesOf(ZONE, 'node-a')).toEqual([`${ip}/32`]);
      expect(kubectl('get', 'ipallocations', '--no-headers')).toContain(ip);
      // CNI DEL from podman itself: `network disconnect` runs it in this podman process. (On stop/rm podman leaves
      // the teardown to conmon's `podman container cleanup`, which does not get this harness's CONTAINERS_CONF
      // and so never finds the network; the pod's netns going away hides that for plugins without state.)
      const r = await env.podman(['network', 'disconnect', NET, c.id], { node });
      if (r.code !== 0) throw new Error(`podman network disconnect failed (exit ${r.code}):\n${r.stdout}${r.stderr}`);
      expect(fake.aliasesOf(ZONE, 'node-a')).toEqual([]);
      expect(kubectl('get', 'ipallocations', '--no-headers', '-o', 'name').trim()).toBe('');
      expect(await c.execOk(['ip', '-4', '-o', 'addr'])).not.toContain(ip);
      removed = (await c.remove()).code === 0;
    } finally {
      if (!removed) await c.remove();
    }
  });
});
