/**
 * VPC route mode in namespaces. "host" is the node, with a primary NIC (a veth
 * into "ext", the VPC) and a default route through it; the VPC route table
 * (ext) sends the node's pod CIDR 10.244.1.0/24 to the node. The datapath on
 * its own, then the whole stack: the CNI handler -> gRPC -> terwayd started in
 * VPC mode (startVpcRouteTerwayd) -> its pod-CIDR allocator.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { sh } from '@cnikit/netlib-testing';
import { startVpcRouteTerwayd, type VpcRouteTerwayd } from '../src/daemon/bootstrap';
import { VpcRouteAllocator } from '../src/daemon/vpc-route';
import { hostVethName } from '../src/datapath/eniip-veth';
import { checkVpcRoutePod, setupVpcRoutePod, teardownVpcRoutePod } from '../src/datapath/vpc-route';
import { ipj, makeTopo, type TestNs, type Topo } from './datapath-helpers';
import { terwayCni } from './support';

jest.setTimeout(60_000);

interface IpRoute {
  dst: string;
  dev?: string;
  gateway?: string;
  flags?: string[];
}
interface IpNeigh {
  dst: string;
  dev: string;
  lladdr?: string;
  state?: string[];
}

let t: Topo;
afterEach(() => t?.cleanup());

/** The node's primary NIC into the VPC, and the VPC route table entry for its pod CIDR. */
function vpcTopo(pods: number): Topo {
  const x = makeTopo(pods);
  sh(x.host.ns, `ip link add eth0 type veth peer name node1 netns ${x.ext.name}`);
  sh(x.host.ns, 'ip addr add 10.6.1.1/24 dev eth0 && ip link set eth0 up && ip route add default via 10.6.1.254');
  sh(x.ext.ns, 'ip addr add 10.6.1.254/24 dev node1 && ip link set node1 up && ip route add 10.244.1.0/24 via 10.6.1.1');
  return x;
}

describe('VPC route datapath', () => {
  it('wires pods: /32 on eth0, default via 169.254.1.1 onlink, permanent neighbours, host /32 routes; real traffic', async () => {
    t = vpcTopo(2);
    const [p0, p1] = t.pods as [TestNs, TestNs];
    const a = await setupVpcRoutePod(t.host.ns, p0.ns, { podNamespace: 'default', podName: 'web-0', ifName: 'eth0', ip: '10.244.1.2' });
    await setupVpcRoutePod(t.host.ns, p1.ns, { podNamespace: 'default', podName: 'web-1', ifName: 'eth0', ip: '10.244.1.3' });
    expect(a.hostVeth).toBe(hostVethName('default', 'web-0'));
    const pr = ipj<IpRoute[]>(p0, 'route show');
    expect(pr.find((r) => r.dst === 'default')).toMatchObject({ gateway: '169.254.1.1', dev: 'eth0', flags: ['onlink'] });
    expect(ipj<{ addr_info: { local: string; prefixlen: number }[] }[]>(p0, '-4 addr show eth0')[0]!.addr_info).toEqual([
      expect.objectContaining({ local: '10.244.1.2', prefixlen: 32 }),
    ]);
    const pn = ipj<IpNeigh[]>(p0, 'neigh show dev eth0').find((n) => n.dst === '169.254.1.1');
    expect(pn).toMatchObject({ lladdr: a.hostVethMac, state: ['PERMANENT'] });
    expect(ipj<IpRoute[]>(t.host, 'route show 10.244.1.2/32')[0]).toMatchObject({ dev: a.hostVeth });
    expect(ipj<IpNeigh[]>(t.host, `neigh show dev ${a.hostVeth}`).find((n) => n.dst === '10.244.1.2')).toMatchObject({
      lladdr: a.podMac,
      state: ['PERMANENT'],
    });
    // No policy routing in this mode.
    expect(ipj<{ priority: number }[]>(t.host, 'rule show').filter((r) => r.priority === 512 || r.priority === 2048)).toEqual([]);

    sh(p0.ns, 'ping -c1 -W2 10.244.1.3'); // pod -> pod through the host
    sh(t.host.ns, 'ping -c1 -W2 10.244.1.2'); // node -> pod
    sh(p0.ns, 'ping -c1 -W2 10.9.9.9'); // pod -> VPC through the node's default route; back by the VPC route table
    sh(t.ext.ns, 'ping -c1 -W2 10.244.1.3'); // VPC -> pod
    expect(
      await checkVpcRoutePod(t.host.ns, p0.ns, { podNamespace: 'default', podName: 'web-0', ifName: 'eth0', ip: '10.244.1.2' }),
    ).toEqual([]);

    // A repeated ADD ends the same.
    const again = await setupVpcRoutePod(t.host.ns, p0.ns, { podNamespace: 'default', podName: 'web-0', ifName: 'eth0', ip: '10.244.1.2' });
    expect(again.hostVeth).toBe(a.hostVeth);
    sh(p0.ns, 'ping -c1 -W2 10.9.9.9');
    expect(ipj<IpRoute[]>(t.host, 'route show 10.244.1.2/32')).toHaveLength(1);

    // CHECK names what broke.
    sh(t.host.ns, `ip route del 10.244.1.2/32 dev ${a.hostVeth}`);
    expect(
      await checkVpcRoutePod(t.host.ns, p0.ns, { podNamespace: 'default', podName: 'web-0', ifName: 'eth0', ip: '10.244.1.2' }),
    ).toEqual([`host route 10.244.1.2/32 dev ${a.hostVeth} is missing`]);

    await teardownVpcRoutePod(t.host.ns, { podNamespace: 'default', podName: 'web-0', ip: '10.244.1.2' });
    await teardownVpcRoutePod(t.host.ns, { podNamespace: 'default', podName: 'web-0', ip: '10.244.1.2' });
    expect(ipj(t.host, 'route show 10.244.1.2/32')).toEqual([]);
    expect(ipj<{ ifname: string }[]>(p0, 'link show').map((l) => l.ifname)).toEqual(['lo']);
    sh(p1.ns, 'ping -c1 -W2 10.9.9.9');
  });

  it('a failed setup leaves nothing behind', async () => {
    t = vpcTopo(1);
    sh(t.pods[0]!.ns, 'ip link add eth0 type veth peer name eth0x');
    await expect(
      setupVpcRoutePod(t.host.ns, t.pods[0]!.ns, { podNamespace: 'ns', podName: 'x', ifName: 'eth0', ip: '10.244.1.9' }),
    ).rejects.toThrow();
    expect(ipj<{ ifname: string }[]>(t.host, 'link show').some((l) => l.ifname === hostVethName('ns', 'x'))).toBe(false);
    expect(ipj(t.host, 'route show 10.244.1.9/32')).toEqual([]);
  });
});

describe('VpcRouteAllocator', () => {
  it('hands out the pod CIDR without network/broadcast, idempotent per pod, code-11 error when full, restores', async () => {
    const a = new VpcRouteAllocator('10.244.1.0/30');
    expect((await a.allocate('ns/a')).ip).toBe('10.244.1.1');
    expect((await a.allocate('ns/a')).ip).toBe('10.244.1.1');
    expect((await a.allocate('ns/b')).ip).toBe('10.244.1.2');
    await expect(a.allocate('ns/c')).rejects.toMatchObject({ name: 'PoolExhaustedError' });
    expect(a.release('ns/a')).toBe(true);
    expect(a.release('ns/a')).toBe(false);
    expect((await a.allocate('ns/c')).ip).toBe('10.244.1.1');
    const b = new VpcRouteAllocator('10.244.1.0/24');
    expect(
      b.restore([
        { key: 'ns/a', ip: '10.244.1.1' },
        { key: 'ns/z', ip: '10.9.0.1' },
      ]),
    ).toEqual(['ns/z']);
    expect((await b.allocate('ns/b')).ip).toBe('10.244.1.2');
    expect(() => new VpcRouteAllocator('10.244.1.0')).toThrow(/pod CIDR/);
  });
});

describe('terway CNI + terwayd --daemon-mode VPC', () => {
  let d: VpcRouteTerwayd | undefined;
  let dir = '';
  afterEach(async () => {
    await d?.stop();
    d = undefined;
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  });

  async function cni(
    socket: string,
    command: 'ADD' | 'DEL' | 'CHECK',
    pod: TestNs,
    name: string,
    extra: Record<string, unknown> = {},
    containerId = `ctr-${name}`,
  ): Promise<{ code: number; out: Record<string, unknown> | undefined }> {
    return terwayCni({ hostNs: t.host.ns, socket, command, pod, name, extra, containerId });
  }

  it('ADD/ADD/CHECK/DEL/DEL with addresses of the pod CIDR; leases survive a restart; CHECK fails with 100', async () => {
    t = vpcTopo(2);
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'terway-vpc-'));
    const socket = path.join(dir, 'eni.socket');
    const opts = { socket, stateFile: path.join(dir, 'pod.json'), podCidr: '10.244.1.0/24', hostNs: t.host.ns, gcIntervalMs: 0 };
    d = await startVpcRouteTerwayd(opts);
    const [p0, p1] = t.pods as [TestNs, TestNs];
    const add = await cni(socket, 'ADD', p0, 'web-0');
    expect(add.code).toBe(0);
    expect(add.out).toMatchObject({
      ips: [{ address: '10.244.1.1/32', gateway: '169.254.1.1' }],
      routes: [{ dst: '0.0.0.0/0', gw: '169.254.1.1' }],
    });
    const add2 = await cni(socket, 'ADD', p0, 'web-0'); // repeated: same address, same datapath
    expect(add2.code).toBe(0);
    expect(add2.out?.['ips']).toEqual(add.out?.['ips']);
    expect((await cni(socket, 'ADD', p1, 'web-1')).out).toMatchObject({ ips: [{ address: '10.244.1.2/32' }] });
    sh(p0.ns, 'ping -c1 -W2 10.9.9.9');
    sh(p0.ns, 'ping -c1 -W2 10.244.1.2');
    expect((await cni(socket, 'CHECK', p0, 'web-0', { prevResult: add.out })).code).toBe(0);

    // Restart: the leases come back from the state file.
    await d.stop();
    d = await startVpcRouteTerwayd(opts);
    expect(d.allocator.leaseOf('default/web-0')?.ip).toBe('10.244.1.1');
    expect((await cni(socket, 'CHECK', p0, 'web-0', { prevResult: add.out })).code).toBe(0);

    sh(t.host.ns, 'ip route del 10.244.1.1/32');
    const bad = await cni(socket, 'CHECK', p0, 'web-0', { prevResult: add.out });
    expect(bad.out).toMatchObject({
      code: 100,
      msg: `terway: CHECK: host route 10.244.1.1/32 dev ${hostVethName('default', 'web-0')} is missing`,
    });

    expect((await cni(socket, 'DEL', p0, 'web-0')).code).toBe(0);
    expect((await cni(socket, 'DEL', p0, 'web-0')).code).toBe(0);
    expect(d.allocator.leaseOf('default/web-0')).toBeUndefined();
    expect(ipj<{ ifname: string }[]>(p0, 'link show').map((l) => l.ifname)).toEqual(['lo']);
    sh(p1.ns, 'ping -c1 -W2 10.9.9.9');
  });

  it('a stale DEL (sandbox A after sandbox B of the same pod took the address) leaves B wired and leased', async () => {
    t = vpcTopo(2);
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'terway-vpc-'));
    const socket = path.join(dir, 'eni.socket');
    d = await startVpcRouteTerwayd({
      socket,
      stateFile: path.join(dir, 'pod.json'),
      podCidr: '10.244.1.0/24',
      hostNs: t.host.ns,
      gcIntervalMs: 0,
    });
    const [nsA, nsB] = t.pods as [TestNs, TestNs];
    const addA = await cni(socket, 'ADD', nsA, 'web-0', {}, 'cid-a');
    const addB = await cni(socket, 'ADD', nsB, 'web-0', {}, 'cid-b');
    expect(addB.out?.['ips']).toEqual(addA.out?.['ips']);
    expect(await cni(socket, 'DEL', nsA, 'web-0', { prevResult: addA.out }, 'cid-a')).toEqual({ code: 0, out: undefined });
    expect(d.allocator.leaseOf('default/web-0')?.ip).toBe('10.244.1.1');
    expect(ipj<IpRoute[]>(t.host, 'route show 10.244.1.1/32')[0]).toMatchObject({ dev: hostVethName('default', 'web-0') });
    sh(nsB.ns, 'ping -c1 -W2 10.9.9.9');
    expect((await cni(socket, 'CHECK', nsB, 'web-0', { prevResult: addB.out }, 'cid-b')).code).toBe(0);
    expect((await cni(socket, 'DEL', nsB, 'web-0', { prevResult: addB.out }, 'cid-b')).code).toBe(0);
    expect(d.allocator.leaseOf('default/web-0')).toBeUndefined();
    expect(ipj(t.host, 'route show 10.244.1.1/32')).toEqual([]);
  });
});
