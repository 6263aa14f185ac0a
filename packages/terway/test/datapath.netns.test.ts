/**
 * ENI multi-IP veth policy routing in real namespaces ("ext" stands for the
 * VPC, an ENI is a veth into it): rules 512/2048, table 1000+ifindex, pod and
 * host routes, real traffic, teardown, stale rule/route repair, and tbf
 * bandwidth shaping shown by the qdiscs' counters under a UDP burst.
 */
import { sh } from '@cnikit/netlib-testing';
import { bandwidthFrom, parseBandwidth, tbfFor } from '../src/datapath/bandwidth';
import { eniTable, hostVethName, repair, setupPod, teardownPod } from '../src/datapath/eniip-veth';
import { ipj, makeTopo, plugEni, rootQdisc, udpBurst, vpcLearn, type Topo } from './datapath-helpers';

jest.setTimeout(90_000);

interface IpRule {
  priority: number;
  src?: string;
  dst?: string;
  table: string;
}
interface IpRoute {
  dst: string;
  dev?: string;
  gateway?: string;
  flags?: string[];
}

let t: Topo;
afterEach(() => t?.cleanup());

function rules(): IpRule[] {
  return ipj<IpRule[]>(t.host, 'rule show').filter((r) => r.priority === 512 || r.priority === 2048);
}

describe('ENI multi-IP, veth policy routing', () => {
  it('wires a pod: names, rules, tables, routes; traffic leaves through its ENI', async () => {
    t = makeTopo(2);
    const eni = plugEni(t, 1);
    const eniIndex = ipj<{ ifindex: number }[]>(t.host, 'link show eni1')[0]!.ifindex;
    const a = await setupPod(t.host.ns, t.pods[0]!.ns, {
      podNamespace: 'default',
      podName: 'web-0',
      ifName: 'eth0',
      ip: '192.168.1.10',
      eni,
    });
    vpcLearn(t, 1, '192.168.1.10');
    expect(a.hostVeth).toBe(hostVethName('default', 'web-0'));
    expect(a.hostVeth).toMatch(/^cali[0-9a-f]{11}$/);
    expect(a.table).toBe(1000 + eniIndex);
    expect(eniTable(eniIndex)).toBe(a.table);

    expect(rules()).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ priority: 512, dst: '192.168.1.10', table: 'main' }),
        expect.objectContaining({ priority: 2048, src: '192.168.1.10', table: String(a.table) }),
      ]),
    );
    const tbl = ipj<IpRoute[]>(t.host, `route show table ${a.table}`);
    expect(tbl.find((r) => r.dst === 'default')).toMatchObject({ gateway: '192.168.1.253', dev: 'eni1' });
    expect(ipj<IpRoute[]>(t.host, 'route show 192.168.1.10/32')[0]?.dev).toBe(a.hostVeth);
    const pr = ipj<IpRoute[]>(t.pods[0]!, 'route show');
    expect(pr.find((r) => r.dst === 'default')).toMatchObject({ gateway: '169.254.1.1', dev: 'eth0' });

    // The host has no default route: reaching 10.9.9.9 proves the ENI table is used.
    sh(t.pods[0]!.ns, 'ping -c1 -W2 10.9.9.9');
    sh(t.pods[0]!.ns, 'ping -c1 -W2 192.168.1.253');
    // Node to pod.
    sh(t.host.ns, 'ping -c1 -W2 -I 10.6.0.1 192.168.1.10');
    // A second pod on the same ENI: pod to pod through the host.
    await setupPod(t.host.ns, t.pods[1]!.ns, { podNamespace: 'default', podName: 'web-1', ifName: 'eth0', ip: '192.168.1.11', eni });
    sh(t.pods[0]!.ns, 'ping -c1 -W2 192.168.1.11');

    // DEL removes everything, twice.
    await teardownPod(t.host.ns, { podNamespace: 'default', podName: 'web-0', ip: '192.168.1.10' });
    await teardownPod(t.host.ns, { podNamespace: 'default', podName: 'web-0', ip: '192.168.1.10' });
    expect(rules().filter((r) => r.src === '192.168.1.10' || r.dst === '192.168.1.10')).toEqual([]);
    expect(ipj(t.host, 'route show 192.168.1.10/32')).toEqual([]);
    expect(ipj(t.host, `link show`).some((l) => l['ifname'] === a.hostVeth)).toBe(false);
    expect(rules()).toHaveLength(2); // web-1's
  });

  it('pods on two ENIs use their own ENI tables', async () => {
    t = makeTopo(2);
    const e1 = plugEni(t, 1);
    const e2 = plugEni(t, 2);
    const a = await setupPod(t.host.ns, t.pods[0]!.ns, { podNamespace: 'ns', podName: 'a', ifName: 'eth0', ip: '192.168.1.20', eni: e1 });
    const b = await setupPod(t.host.ns, t.pods[1]!.ns, { podNamespace: 'ns', podName: 'b', ifName: 'eth0', ip: '192.168.2.20', eni: e2 });
    expect(a.table).not.toBe(b.table);
    vpcLearn(t, 1, '192.168.1.20');
    vpcLearn(t, 2, '192.168.2.20');
    const before = ipj<{ ifname: string; stats64: { tx: { packets: number } } }[]>(t.host, '-s link show eni2')[0]!.stats64.tx.packets;
    sh(t.pods[1]!.ns, 'ping -c3 -i0.2 -W2 10.9.9.9');
    const after = ipj<{ stats64: { tx: { packets: number } } }[]>(t.host, '-s link show eni2')[0]!.stats64.tx.packets;
    expect(after - before).toBeGreaterThanOrEqual(3);
    sh(t.pods[0]!.ns, 'ping -c1 -W2 10.9.9.9');
  });

  it('repair() prunes stale rules and routes and restores missing ones', async () => {
    t = makeTopo(1);
    const eni = plugEni(t, 1);
    const a = await setupPod(t.host.ns, t.pods[0]!.ns, { podNamespace: 'ns', podName: 'live', ifName: 'eth0', ip: '192.168.1.30', eni });
    // Leftovers of a pod deleted without DEL: rules and a route through a dangling cali link.
    sh(t.host.ns, `ip rule add to 192.168.1.99/32 lookup main pref 512 && ip rule add from 192.168.1.99/32 lookup ${a.table} pref 2048`);
    sh(
      t.host.ns,
      'ip link add cali000000dead0 type veth peer name xdead && ip link set cali000000dead0 up && ip route add 192.168.1.99/32 dev cali000000dead0 scope link',
    );
    // A live pod's rule lost, another pointing at a wrong table, its route gone.
    sh(t.host.ns, 'ip rule del to 192.168.1.30/32 lookup main pref 512');
    sh(t.host.ns, `ip rule del from 192.168.1.30/32 lookup ${a.table} pref 2048 && ip rule add from 192.168.1.30/32 lookup 1999 pref 2048`);
    sh(t.host.ns, `ip route del 192.168.1.30/32 dev ${a.hostVeth}`);
    sh(t.host.ns, `ip route flush table ${a.table}`);

    const rep = await repair(t.host.ns, [
      { podNamespace: 'ns', podName: 'live', ip: '192.168.1.30', eniMac: eni.mac, gateway: eni.gateway },
    ]);
    expect(rep.rulesRemoved.sort()).toEqual(
      ['2048 192.168.1.30/32 table 1999', `2048 192.168.1.99/32 table ${a.table}`, '512 192.168.1.99/32 table 254'].sort(),
    );
    expect(rep.rulesAdded.sort()).toEqual([`2048 from 192.168.1.30/32 table ${a.table}`, '512 to 192.168.1.30/32'].sort());
    expect(rep.routesRemoved).toEqual(['192.168.1.99/32 dev cali000000dead0']);
    expect(rep.routesAdded).toEqual([`192.168.1.30/32 dev ${a.hostVeth}`]);
    vpcLearn(t, 1, '192.168.1.30');
    sh(t.pods[0]!.ns, 'ping -c1 -W2 10.9.9.9');
    // A second pass finds nothing to do.
    const again = await repair(t.host.ns, [
      { podNamespace: 'ns', podName: 'live', ip: '192.168.1.30', eniMac: eni.mac, gateway: eni.gateway },
    ]);
    expect(again).toEqual({ rulesRemoved: [], rulesAdded: [], routesRemoved: [], routesAdded: [] });
  });

  it('a failed setup leaves nothing behind', async () => {
    t = makeTopo(1);
    const eni = plugEni(t, 1);
    // The pod already holds an eth0: the veth cannot be created there.
    sh(t.pods[0]!.ns, 'ip link add eth0 type veth peer name eth0x');
    await expect(
      setupPod(t.host.ns, t.pods[0]!.ns, { podNamespace: 'ns', podName: 'x', ifName: 'eth0', ip: '192.168.1.40', eni }),
    ).rejects.toThrow();
    expect(rules()).toEqual([]);
    expect(ipj(t.host, 'link show').some((l) => String(l['ifname']).startsWith('cali'))).toBe(false);
    // An unknown ENI MAC is an error naming it.
    await expect(
      setupPod(t.host.ns, t.pods[0]!.ns, {
        podNamespace: 'ns',
        podName: 'x',
        ifName: 'eth1',
        ip: '192.168.1.40',
        eni: { mac: '00:16:3e:ff:ff:ff', gateway: '192.168.1.253' },
      }),
    ).rejects.toThrow(/00:16:3e:ff:ff:ff/);
  });
});

describe('bandwidth', () => {
  it('parses annotations and the capability', () => {
    expect(parseBandwidth('x', '10M')).toBe(10_000_000);
    expect(parseBandwidth('x', '512Ki')).toBe(524_288);
    expect(() => parseBandwidth('annotation k8s.aliyun.com/ingress-bandwidth', '10 mbit')).toThrow(/ingress-bandwidth.*10 mbit/);
    expect(bandwidthFrom({ 'k8s.aliyun.com/ingress-bandwidth': '1G' }, { ingressRate: 5, egressRate: 2_000_000 })).toEqual({
      ingressBps: 1e9,
      egressBps: 2_000_000,
    });
    expect(tbfFor(8_000_000)).toEqual({ rateBps: 1_000_000, burstBytes: 20_000, latencyUs: 25_000 });
  });

  // Shaping is shown by the kernel's own counters, not by a measured rate (that depends on the machine's load):
  // the tbf carries the limit, and a burst far beyond its bucket and queue is cut (drops counted) while
  // part of it passes. Throughput figures belong to `npm run bench`.
  it('tbf with the limit on both veth ends: a burst beyond the bucket is cut in each direction', async () => {
    t = makeTopo(1);
    const eni = plugEni(t, 1);
    const a = await setupPod(t.host.ns, t.pods[0]!.ns, {
      podNamespace: 'ns',
      podName: 'bw',
      ifName: 'eth0',
      ip: '192.168.1.50',
      eni,
      bandwidth: bandwidthFrom({ 'k8s.aliyun.com/ingress-bandwidth': '20M', 'k8s.aliyun.com/egress-bandwidth': '10M' }),
    });
    vpcLearn(t, 1, '192.168.1.50');
    const egress = tbfFor(10_000_000);
    const ingress = tbfFor(20_000_000);
    expect(rootQdisc(t.pods[0]!, 'eth0')).toMatchObject({
      kind: 'tbf',
      options: { rate: egress.rateBps, burst: egress.burstBytes, lat: egress.latencyUs },
      drops: 0,
    });
    expect(rootQdisc(t.host, a.hostVeth)).toMatchObject({
      kind: 'tbf',
      options: { rate: ingress.rateBps, burst: ingress.burstBytes, lat: ingress.latencyUs },
      drops: 0,
    });

    udpBurst(t.pods[0]!, '10.9.9.9'); // pod -> VPC: the pod's eth0 shapes
    const up = rootQdisc(t.pods[0]!, 'eth0');
    expect(up.packets).toBeGreaterThan(0);
    expect(up.drops).toBeGreaterThan(0);

    udpBurst(t.ext, '192.168.1.50'); // VPC -> pod, forwarded by the node: the host veth shapes
    const down = rootQdisc(t.host, a.hostVeth);
    expect(down.packets).toBeGreaterThan(0);
    expect(down.drops).toBeGreaterThan(0);
    // The egress shaper saw none of the ingress burst.
    expect(rootQdisc(t.pods[0]!, 'eth0').drops).toBe(up.drops);
  });
});
