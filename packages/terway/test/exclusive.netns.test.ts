/**
 * Exclusive ENI in namespaces: the ENI (a veth into "ext") moves into the pod
 * as eth0 and reaches the VPC directly; Services on the host are reached
 * through veth1; teardown gives the ENI back under its host name.
 */
import { sh } from '@cnikit/netlib-testing';
import { setupExclusivePod, teardownExclusivePod } from '../src/datapath/exclusive-eni';
import { hostVethName } from '../src/datapath/eniip-veth';
import { ipj, makeTopo, plugEni, type Topo } from './datapath-helpers';

jest.setTimeout(60_000);

let t: Topo;
afterEach(() => t?.cleanup());

interface IpLink {
  ifname: string;
  address: string;
  ifalias?: string;
}
interface IpRoute {
  dst: string;
  dev?: string;
  gateway?: string;
}

it('moves the ENI into the pod, adds the Service veth, and gives the ENI back on DEL', async () => {
  t = makeTopo(1);
  const eni = plugEni(t, 1);
  sh(t.host.ns, 'ip addr add 10.96.0.10/32 dev lo'); // a "Service" answered on the host
  const pod = t.pods[0]!;
  const r = await setupExclusivePod(t.host.ns, pod.ns, {
    podNamespace: 'ns',
    podName: 'db',
    ifName: 'eth0',
    eni: { mac: eni.mac, ip: '192.168.1.7', prefix: 24, gateway: eni.gateway },
    serviceCidrs: ['10.96.0.0/12'],
  });
  expect(r).toEqual({ hostVeth: hostVethName('ns', 'db'), eniName: 'eni1' });
  const eth0 = ipj<IpLink[]>(pod, 'link show eth0')[0]!;
  expect(eth0.address).toBe(eni.mac);
  expect(eth0.ifalias).toBe('terway-eni:eni1');
  expect(ipj<IpLink[]>(t.host, 'link show').some((l) => l.address === eni.mac)).toBe(false);
  const routes = ipj<IpRoute[]>(pod, 'route show');
  expect(routes.find((x) => x.dst === 'default')).toMatchObject({ gateway: '192.168.1.253', dev: 'eth0' });
  expect(routes.find((x) => x.dst === '10.96.0.0/12')).toMatchObject({ gateway: '169.254.1.1', dev: 'veth1' });
  // The VPC directly through the ENI (no host involved), the Service through the host.
  sh(pod.ns, 'ping -c1 -W2 10.9.9.9');
  sh(pod.ns, 'ping -c1 -W2 10.96.0.10');

  await teardownExclusivePod(t.host.ns, pod.ns, { podNamespace: 'ns', podName: 'db', mac: eni.mac });
  await teardownExclusivePod(t.host.ns, pod.ns, { podNamespace: 'ns', podName: 'db', mac: eni.mac });
  const back = ipj<IpLink[]>(t.host, 'link show eni1')[0]!;
  expect(back.address).toBe(eni.mac);
  expect(back.ifalias ?? '').toBe('');
  expect(ipj<IpLink[]>(t.host, 'link show').some((l) => l.ifname === r.hostVeth)).toBe(false);
  expect(ipj<IpLink[]>(pod, 'link show').map((l) => l.ifname)).toEqual(['lo']);
});

it('a repeated setup starts over and ends the same', async () => {
  t = makeTopo(1);
  const eni = plugEni(t, 1);
  const pod = t.pods[0]!;
  const p = {
    podNamespace: 'ns',
    podName: 'y',
    ifName: 'eth0',
    eni: { mac: eni.mac, ip: '192.168.1.9', prefix: 24, gateway: eni.gateway },
    serviceCidrs: [],
  };
  await setupExclusivePod(t.host.ns, pod.ns, p);
  await setupExclusivePod(t.host.ns, pod.ns, p);
  expect(
    ipj<IpLink[]>(pod, 'link show')
      .map((l) => l.ifname)
      .sort(),
  ).toEqual(['eth0', 'lo', 'veth1']);
  sh(pod.ns, 'ping -c1 -W2 10.9.9.9');
});

it('a failed setup gives the ENI back', async () => {
  t = makeTopo(1);
  const eni = plugEni(t, 1);
  const pod = t.pods[0]!;
  // The Service veth cannot be created: the pod already has a veth1.
  sh(pod.ns, 'ip link add veth1 type veth peer name tmpx');
  await expect(
    setupExclusivePod(t.host.ns, pod.ns, {
      podNamespace: 'ns',
      podName: 'x',
      ifName: 'eth0',
      eni: { mac: eni.mac, ip: '192.168.1.8', prefix: 24, gateway: eni.gateway },
      serviceCidrs: [],
    }),
  ).rejects.toThrow(/EEXIST/);
  expect(ipj<IpLink[]>(t.host, 'link show eni1')[0]?.address).toBe(eni.mac);
  expect(
    ipj<IpLink[]>(pod, 'link show')
      .map((l) => l.ifname)
      .sort(),
  ).toEqual(['lo', 'tmpx', 'veth1']);
  expect(ipj<IpLink[]>(t.host, 'link show').some((l) => l.ifname === hostVethName('ns', 'x'))).toBe(false);
});
