/**
 * A two-node Coil cluster on one machine: each node a network namespace (eth0 on a shared bridge in a "lan"
 * namespace, forwarding left off for coild to turn on) with its own in-process coild (own node name, own socket, the node's
 * namespace as its host), pods as namespaces, and the `coil` plugin run in-process against a node's socket.
 * Routes a node exports to table 119 are imported by the other node as BIRD would (via its eth0 address).
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { runPlugin, route, type Netns } from '@cnikit/netlib';
import { newNs, sh } from '@cnikit/netlib-testing';
import type { KubeTransport } from '@cnikit/kube';
import { Registry } from '@cnikit/kube/prom';
import * as plugin from '../src/cni/plugin';
import { Coild } from '../src/coild/coild';
import { CoildServer } from '../src/coild/server';
import { createNode, uname } from './support';

export interface TestNode {
  name: string;
  nsName: string;
  ns: Netns;
  ip: string;
  ip6: string;
  socket: string;
  coild: Coild;
  server: CoildServer;
  registry: Registry;
}

export interface Pod {
  nsName: string;
  ns: Netns;
  path: string;
  containerId: string;
  cleanup(): void;
}

const cleanups: (() => void | Promise<void>)[] = [];
export const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'coil-test-'));

export function makeLan(): string {
  const lan = newNs('coillan');
  cleanups.push(() => lan.cleanup());
  sh(lan.ns, 'ip link add br0 type bridge && ip link set br0 up');
  return lan.name;
}

export async function makeNode(
  t: KubeTransport,
  lan: string,
  i: number,
): Promise<{ name: string; nsName: string; ns: Netns; ip: string; ip6: string }> {
  const n = newNs(`coiln${i}`);
  cleanups.push(() => n.cleanup());
  const ip4 = `10.99.0.${i}`;
  const ip6 = `fd00:99::${i}`;
  sh(n.ns, `ip link add eth0 type veth peer name n${i}-${n.name.slice(-4)} && ip link set n${i}-${n.name.slice(-4)} netns ${lan}`);
  sh(lan, `ip link set n${i}-${n.name.slice(-4)} master br0 up`);
  sh(
    n.ns,
    [
      // No forwarding here: the namespace starts with ip_forward=0, and coild must turn it on itself.
      'sysctl -qw net.ipv6.conf.all.disable_ipv6=0',
      'sysctl -qw net.ipv6.conf.default.disable_ipv6=0',
      'sysctl -qw net.ipv6.conf.eth0.disable_ipv6=0',
      `ip addr add ${ip4}/24 dev eth0`,
      `ip addr add ${ip6}/64 dev eth0 nodad`,
      'ip link set eth0 up',
    ].join(' && '),
  );
  const name = uname(`node${i}-`);
  await createNode(t, name, ip4, ip6);
  return { name, nsName: n.name, ns: n.ns, ip: ip4, ip6 };
}

export async function startCoild(
  t: KubeTransport,
  n: { name: string; nsName: string; ns: Netns; ip: string; ip6: string },
  socket?: string,
): Promise<TestNode> {
  const registry = new Registry();
  const coild = new Coild({ transport: t, nodeName: n.name, hostNs: n.ns, gcIntervalMs: 3_600_000 });
  await coild.start();
  const sock = socket ?? path.join(dir, `${n.name}.sock`);
  const server = new CoildServer(coild, { socketPath: sock, registry });
  await server.listen();
  return { ...n, socket: sock, coild, server, registry };
}

export async function stopCoild(n: TestNode): Promise<void> {
  await n.server.close();
  await n.coild.stop();
}

let seq = 0;
export function makePod(): Pod {
  const p = newNs('coilpod');
  cleanups.push(() => p.cleanup());
  seq++;
  return { nsName: p.name, ns: p.ns, path: p.ns.path, containerId: `ctr${process.pid.toString(16)}x${seq}`, cleanup: () => p.cleanup() };
}

export interface CallOpts {
  command: 'ADD' | 'DEL' | 'CHECK' | 'GC' | 'STATUS';
  version?: string;
  namespace?: string;
  podName?: string;
  ifName?: string;
  extra?: Record<string, unknown>;
  netns?: string;
}

export async function cni(
  node: TestNode,
  pod: Pod | undefined,
  o: CallOpts,
): Promise<{ code: number; out: Record<string, unknown> | undefined }> {
  const conf = { cniVersion: o.version ?? '1.1.0', name: 'k8s-pod-network', type: 'coil', socket: node.socket, ...o.extra };
  const env: Record<string, string> = {
    CNI_COMMAND: o.command,
    CNI_CONTAINERID: pod?.containerId ?? '',
    CNI_NETNS: o.netns ?? pod?.path ?? '',
    CNI_IFNAME: o.ifName ?? (pod ? 'eth0' : ''),
    CNI_PATH: '/opt/cni/bin',
    CNI_ARGS: `IgnoreUnknown=1;K8S_POD_NAMESPACE=${o.namespace ?? 'default'};K8S_POD_NAME=${o.podName ?? pod?.nsName ?? ''}`,
  };
  const res = await runPlugin(plugin, { versions: plugin.VERSIONS, about: 'coil test' }, { env, stdin: JSON.stringify(conf) });
  return { code: res.exitCode, out: res.stdout.trim() ? (JSON.parse(res.stdout) as Record<string, unknown>) : undefined };
}

/** What BIRD would do: `to` learns every table-119 route of `from`, via from's address on the LAN. */
export async function importRoutes(from: TestNode, to: TestNode): Promise<void> {
  for (const fam of [4, 6] as const) {
    const exported = (await route.list(from.ns, { table: 119, family: fam })).filter((r) => r.protocol === 30);
    const imported = (await route.list(to.ns, { family: fam })).filter((r) => r.protocol === 186);
    for (const r of imported) if (!exported.some((e) => e.dst === r.dst)) await route.del(to.ns, { dst: r.dst, protocol: 186 });
    for (const r of exported) await route.replace(to.ns, { dst: r.dst, gw: fam === 4 ? from.ip : from.ip6, protocol: 186 });
  }
}

export async function cleanupAll(): Promise<void> {
  for (const c of cleanups.splice(0).reverse()) {
    try {
      await c();
    } catch {
      // best effort
    }
  }
  fs.rmSync(dir, { recursive: true, force: true });
}
