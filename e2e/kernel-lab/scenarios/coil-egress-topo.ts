/**
 * The lab's stand-in for a cluster with one Egress, as network namespaces joined by veths:
 *
 *   client pod (10.100.0.2, fd00:100::2)  --c0--+
 *   router pod (10.101.0.2, fd00:101::2)  --r0--+ node: routes between them, forwards, and
 *   internet   (203.0.113.2, 2001:db8:1::2)--i0-+       DNATs the Egress Service
 *                                                      10.96.0.10 / fd00:96::10 udp 5555 -> router
 *
 * The internet host also holds 198.51.100.2 / 2001:db8:2::2 (public, not in the first Egress)
 * and 172.20.0.2 / fd20::2 (private destinations, table 117). The node routes back to every pod
 * address, so a destination reached without the tunnel sees the client's own address, and one
 * reached through it the router's: that is what the checks look at.
 */
import { addr, link, route, sysctl, tunnel } from '@cnikit/netlib';
import { newNs } from '@cnikit/netlib-testing';
import { check, run, tcpExchange } from './guest';

export const FOU_PORT = 5555;
export const CLIENT = { v4: '10.100.0.2', v6: 'fd00:100::2' };
export const ROUTER = { v4: '10.101.0.2', v6: 'fd00:101::2' };
export const SERVICE = { v4: '10.96.0.10', v6: 'fd00:96::10' };
export const INTERNET = { v4: '203.0.113.2', v6: '2001:db8:1::2' };
export const OTHER = { v4: '198.51.100.2', v6: '2001:db8:2::2' };
export const PRIVATE = { v4: '172.20.0.2', v6: 'fd20::2' };

export type Ns = ReturnType<typeof newNs>;

export interface Topology {
  node: Ns;
  client: Ns;
  router: Ns;
  inet: Ns;
}

async function addAddrs(t: Ns, dev: string, cidrs: string[]): Promise<void> {
  const l = await link.get(t.ns, dev);
  for (const c of cidrs) await addr.add(t.ns, l.index, c, { noDad: true });
  await link.setUp(t.ns, l.index);
}

async function pod(
  node: Ns,
  name: string,
  nodeDev: string,
  gw: { v4: string; v6: string },
  cidrs: string[],
  nodeCidrs: string[],
): Promise<Ns> {
  const p = newNs(name);
  await link.addVeth(node.ns, { name: nodeDev, peerName: 'eth0', peerNs: p.ns });
  await addAddrs(node, nodeDev, nodeCidrs);
  await addAddrs(p, 'eth0', cidrs);
  await route.add(p.ns, { dst: 'default', gw: gw.v4 });
  await route.add(p.ns, { dst: 'default', gw: gw.v6, family: 6 });
  return p;
}

export async function buildTopology(): Promise<Topology> {
  const node = newNs('kln');
  sysctl.set(node.ns, 'net/ipv4/ip_forward', 1);
  sysctl.set(node.ns, 'net/ipv6/conf/all/forwarding', 1);
  const client = await pod(
    node,
    'klc',
    'c0',
    { v4: '10.100.0.1', v6: 'fd00:100::1' },
    [`${CLIENT.v4}/24`, `${CLIENT.v6}/64`],
    ['10.100.0.1/24', 'fd00:100::1/64'],
  );
  const router = await pod(
    node,
    'klr',
    'r0',
    { v4: '10.101.0.1', v6: 'fd00:101::1' },
    [`${ROUTER.v4}/24`, `${ROUTER.v6}/64`],
    ['10.101.0.1/24', 'fd00:101::1/64'],
  );
  const inet = await pod(
    node,
    'kli',
    'i0',
    { v4: '203.0.113.1', v6: '2001:db8:1::1' },
    [`${INTERNET.v4}/24`, `${INTERNET.v6}/64`],
    ['203.0.113.1/24', '2001:db8:1::1/64'],
  );
  const extra = await tunnel.addDummy(inet.ns, { name: 'extra' });
  for (const c of [`${OTHER.v4}/32`, `${OTHER.v6}/128`, `${PRIVATE.v4}/32`, `${PRIVATE.v6}/128`])
    await addr.add(inet.ns, extra.index, c, { noDad: true });
  await link.setUp(inet.ns, extra.index);
  for (const [dst, gw] of [
    ['198.51.100.0/24', INTERNET.v4],
    ['172.20.0.0/16', INTERNET.v4],
    ['2001:db8:2::/64', INTERNET.v6],
    ['fd20::/64', INTERNET.v6],
  ] as const) {
    await route.add(node.ns, { dst, gw });
  }
  // kube-proxy's part: the Egress Service's ClusterIP on the FoU port goes to the router pod.
  run('ip', [
    'netns',
    'exec',
    node.name,
    'iptables',
    '-w',
    '-t',
    'nat',
    '-A',
    'PREROUTING',
    '-d',
    `${SERVICE.v4}/32`,
    '-p',
    'udp',
    '--dport',
    String(FOU_PORT),
    '-j',
    'DNAT',
    '--to-destination',
    `${ROUTER.v4}:${FOU_PORT}`,
  ]);
  run('ip', [
    'netns',
    'exec',
    node.name,
    'ip6tables',
    '-w',
    '-t',
    'nat',
    '-A',
    'PREROUTING',
    '-d',
    `${SERVICE.v6}/128`,
    '-p',
    'udp',
    '--dport',
    String(FOU_PORT),
    '-j',
    'DNAT',
    '--to-destination',
    `[${ROUTER.v6}]:${FOU_PORT}`,
  ]);
  return { node, client, router, inet };
}

/** Everything egress-related a namespace holds, as iproute2 prints it (for "nothing changed" checks). */
export function snapshot(t: Ns): string {
  return [
    run('ip', ['-n', t.name, '-d', 'link', 'show']).replace(/^\s+(RX|TX).*$/gm, ''),
    run('ip', ['-n', t.name, '-4', 'rule']),
    run('ip', ['-n', t.name, '-6', 'rule']),
    run('ip', ['-n', t.name, '-4', 'route', 'show', 'table', 'all']),
    run('ip', ['-n', t.name, '-6', 'route', 'show', 'table', 'all']),
    run('ip', ['-n', t.name, 'fou', 'show']),
  ].join('\n');
}

let port = 9000;

/** The source address the internet host sees for a TCP connection from the client to `dst`. */
export async function seenFrom(t: Topology, dst: string, timeoutMs = 8000): Promise<string> {
  const ex = await tcpExchange({ serverNs: t.inet.name, clientNs: t.client.name, host: dst, port: port++, msg: `to-${dst}`, timeoutMs });
  check(ex.got === `to-${dst}`, `server at ${dst} got ${JSON.stringify(ex.got)}`);
  return ex.peer.replace(/^::ffff:/, '');
}
