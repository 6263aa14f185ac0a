/**
 * Test topology for the router plugin, in the pattern of the reference
 * plugins: namespaces made per test, the plugin run in-process with the test's
 * "host" netns handed to it as the node's namespace.
 *
 *   ext netns (10.6.0.9, gateway 10.6.0.254, "internet" 192.168.100.1 on lo)
 *        │ eth0 ── exth (port of br0)
 *   host netns: br0 10.6.0.1/16 fd00:6::1/64 (macvlan parent), forwarding on
 *               kube-ipvs0: Services 10.96.0.10, fd00:96::10
 *               caliP ── eth0 of the pod   (10.244.0.5/32 fd00:244::5/128 via caliP, like calico)
 *               caliQ ── eth0 of "peer"    (another overlay pod, 10.244.0.6)
 *               br1 (no address, net2's parent) ── exth2 ── ext2 (10.7.0.9, gw 10.7.0.254, 192.168.101.1)
 *   pod netns:  eth0 default via 169.254.1.1 onlink (fe80::1 for IPv6), PERMANENT neighbour to caliP
 *               net1 = macvlan of br0, 10.6.1.5/16 fd00:6::15/64   (what macvlan + host-local leave)
 *               net2 = macvlan of br1, 10.7.1.5/16 fd00:7::15/64   (3-NIC tests)
 *
 * ext has no route to the overlay: a reply from ext proves the pod used its
 * macvlan address as source. The host cannot reach the macvlan NIC through
 * br0 (macvlan isolates the parent): a reply from net1's address to the host
 * proves the host route through caliP.
 */
import * as path from 'node:path';
import * as os from 'node:os';
import { runPlugin } from '@cnikit/netlib';
import { newNs, sh as shIn, type TestNs } from '@cnikit/netlib-testing';
import { routerHandlers } from '../src/plugin';

export const VERSIONS = ['0.3.0', '0.3.1', '0.4.0', '1.0.0', '1.1.0'] as const;
export type Stack = 'v4' | 'v6' | 'dual';

export interface Topo {
  host: TestNs;
  pod: TestNs;
  peer: TestNs;
  ext: TestNs;
  ext2?: TestNs;
  stack: Stack;
  containerId: string;
  cleanup(): void;
}

let seq = 0;

/** `sh -c cmd` inside a test namespace; stdout, throws on failure. */
export const sh = (n: TestNs, cmd: string): string => shIn(n.name, cmd);

const has4 = (s: Stack): boolean => s !== 'v6';
const has6 = (s: Stack): boolean => s !== 'v4';

export type OverlayKind = 'calico' | 'bridge';

/** Like calico: a veth per pod, /32 and /128 routes on the host, default via 169.254.1.1 / fe80::1. */
function overlayPod(host: TestNs, pod: TestNs, hostIf: string, last: number, stack: Stack): void {
  sh(
    host,
    `ip link add ${hostIf} type veth peer name eth0 netns ${pod.name} && ip link set ${hostIf} up && sysctl -qw net.ipv4.conf.${hostIf}.proxy_arp=1`,
  );
  const mac = sh(host, `cat /sys/class/net/${hostIf}/address`).trim();
  sh(pod, 'ip link set eth0 up');
  if (has4(stack)) {
    sh(host, `ip route add 10.244.0.${last}/32 dev ${hostIf} scope link`);
    sh(
      pod,
      `ip addr add 10.244.0.${last}/32 dev eth0 && ip route add 169.254.1.1 dev eth0 scope link && ip route add default via 169.254.1.1 dev eth0 onlink && ip neigh add 169.254.1.1 lladdr ${mac} dev eth0 nud permanent`,
    );
  }
  if (has6(stack)) {
    sh(host, `ip -6 route add fd00:244::${last}/128 dev ${hostIf}`);
    sh(
      pod,
      `ip addr add fd00:244::${last}/128 dev eth0 nodad && ip -6 route add default via fe80::1 dev eth0 && ip -6 neigh add fe80::1 lladdr ${mac} dev eth0 nud permanent`,
    );
  }
}

/** Like Debian's bridge plugin: pods' veths on cni0 (10.244.0.1/24, fd00:244::1/64), default via the bridge. */
export function bridgePod(host: TestNs, pod: TestNs, hostIf: string, last: number, stack: Stack): void {
  sh(host, `ip link add ${hostIf} type veth peer name eth0 netns ${pod.name} && ip link set ${hostIf} master cni0 up`);
  sh(pod, 'ip link set eth0 up');
  if (has4(stack)) sh(pod, `ip addr add 10.244.0.${last}/24 dev eth0 && ip route add default via 10.244.0.1 dev eth0`);
  if (has6(stack)) sh(pod, `ip addr add fd00:244::${last}/64 dev eth0 nodad && ip -6 route add default via fd00:244::1 dev eth0`);
}

function extNet(host: TestNs, ext: TestNs, bridge: string, port: string, n: number, stack: Stack): void {
  sh(host, `ip link add ${port} type veth peer name eth0 netns ${ext.name} && ip link set ${port} master ${bridge} up`);
  sh(ext, 'ip link set eth0 up');
  if (has4(stack))
    sh(ext, `ip addr add 10.${n}.0.9/16 dev eth0 && ip addr add 10.${n}.0.254/16 dev eth0 && ip addr add 192.168.${94 + n}.1/32 dev lo`);
  if (has6(stack))
    sh(
      ext,
      `ip addr add fd00:${n}::9/64 dev eth0 nodad && ip addr add fd00:${n}::fe/64 dev eth0 nodad && ip addr add fd00:${94 + n}::1/128 dev lo nodad`,
    );
}

export function macvlanNic(host: TestNs, pod: TestNs, parent: string, name: string, n: number, stack: Stack, last = 5): void {
  const tmp = `mv${n}${last}`;
  sh(host, `ip link add ${tmp} link ${parent} type macvlan mode bridge && ip link set ${tmp} netns ${pod.name}`);
  sh(pod, `ip link set ${tmp} name ${name} && ip link set ${name} up`);
  if (has4(stack)) sh(pod, `ip addr add 10.${n}.1.${last}/16 dev ${name}`);
  if (has6(stack)) sh(pod, `ip addr add fd00:${n}::1${last}/64 dev ${name} nodad`);
}

/** Host, pod (eth0 from the "overlay", net1 from macvlan), another overlay pod and an external host; net2 on request. */
export function makeTopo(opts: { stack?: Stack; net2?: boolean; overlay?: OverlayKind; peerNet1?: boolean } = {}): Topo {
  const stack = opts.stack ?? 'v4';
  const overlay = opts.overlay ?? 'calico';
  const host = newNs('rh');
  const pod = newNs('rp');
  const peer = newNs('rq');
  const ext = newNs('re');
  const ext2 = opts.net2 ? newNs('rf') : undefined;
  const t: Topo = {
    host,
    pod,
    peer,
    ext,
    stack,
    containerId: `c${process.pid.toString(16)}${(seq++).toString(16).padStart(4, '0')}router`,
    cleanup() {
      for (const n of [pod, peer, ext, ext2, host]) n?.cleanup();
    },
  };
  if (ext2) t.ext2 = ext2;
  try {
    // No duplicate address detection: link-local addresses usable at once, no first-packet loss.
    for (const n of [host, pod, peer, ext, ext2])
      if (n) sh(n, 'sysctl -qw net.ipv6.conf.all.accept_dad=0 && sysctl -qw net.ipv6.conf.default.accept_dad=0');
    sh(host, 'sysctl -qw net.ipv4.ip_forward=1 && sysctl -qw net.ipv6.conf.all.forwarding=1');
    sh(host, 'ip link add br0 type bridge && ip link set br0 up');
    if (has4(stack)) sh(host, 'ip addr add 10.6.0.1/16 dev br0');
    if (has6(stack)) sh(host, 'ip addr add fd00:6::1/64 dev br0 nodad');
    extNet(host, ext, 'br0', 'exth', 6, stack);
    // Services on a device created after br0, as kube-proxy's kube-ipvs0: never the host's source address.
    sh(host, 'ip link add kube-ipvs0 type bridge && ip link set kube-ipvs0 up && ip addr add 10.96.0.10/32 dev kube-ipvs0');
    sh(host, 'ip addr add fd00:96::10/128 dev kube-ipvs0 nodad preferred_lft 0');
    if (overlay === 'bridge') {
      sh(host, 'ip link add cni0 type bridge && ip link set cni0 up');
      if (has4(stack)) sh(host, 'ip addr add 10.244.0.1/24 dev cni0');
      if (has6(stack)) sh(host, 'ip addr add fd00:244::1/64 dev cni0 nodad');
      bridgePod(host, pod, 'vethP', 5, stack);
      bridgePod(host, peer, 'vethQ', 6, stack);
    } else {
      overlayPod(host, pod, 'caliP', 5, stack);
      overlayPod(host, peer, 'caliQ', 6, stack);
    }
    macvlanNic(host, pod, 'br0', 'net1', 6, stack);
    if (opts.peerNet1) macvlanNic(host, peer, 'br0', 'net1', 6, stack, 6);
    if (ext2) {
      sh(host, 'ip link add br1 type bridge && ip link set br1 up');
      extNet(host, ext2, 'br1', 'exth2', 7, stack);
      macvlanNic(host, pod, 'br1', 'net2', 7, stack);
    }
  } catch (e) {
    t.cleanup();
    throw e;
  }
  return t;
}

/** The addresses and routes macvlan + host-local would report for netN (n = 6 for net1, 7 for net2). */
export function prevResult(
  version: string,
  t: Topo,
  ifName = 'net1',
  n = ifName === 'net2' ? 7 : 6,
  last = 5,
  sandbox = t.pod.ns.path,
): Record<string, unknown> {
  const old = version.startsWith('0.');
  const ips: Record<string, unknown>[] = [];
  const routes: Record<string, unknown>[] = [];
  if (has4(t.stack)) {
    ips.push({ ...(old ? { version: '4' } : {}), address: `10.${n}.1.${last}/16`, gateway: `10.${n}.0.254`, interface: 0 });
    routes.push({ dst: '0.0.0.0/0' });
  }
  if (has6(t.stack)) {
    ips.push({ ...(old ? { version: '6' } : {}), address: `fd00:${n}::1${last}/64`, gateway: `fd00:${n}::fe`, interface: 0 });
    routes.push({ dst: '::/0' });
  }
  return { cniVersion: version, interfaces: [{ name: ifName, mac: '02:00:00:00:00:01', sandbox }], ips, routes };
}

export function routerConf(
  version: string,
  prev: Record<string, unknown> | undefined,
  extra: Record<string, unknown> = {},
): Record<string, unknown> {
  return {
    cniVersion: version,
    name: 'mv-router',
    type: 'router',
    overlay_hijack_subnet: ['10.244.0.0/16', 'fd00:244::/64'],
    service_hijack_subnet: ['10.96.0.0/12', 'fd00:96::/112'],
    log_options: { log_file: path.join(os.tmpdir(), 'cnikit-test-router.log') },
    ...(prev ? { prevResult: prev } : {}),
    ...extra,
  };
}

export interface Call {
  command: 'ADD' | 'DEL' | 'CHECK' | 'GC' | 'STATUS' | 'VERSION';
  conf: Record<string, unknown> | string;
  containerId?: string;
  netns?: string;
  ifName?: string;
  env?: Record<string, string | undefined>;
}

export interface CallResult {
  out: Record<string, unknown> | undefined;
  code: number;
  raw: string;
}

/** Runs the plugin in-process with the test's host netns as the node's namespace. */
export async function call(t: Topo, c: Call): Promise<CallResult> {
  const env: Record<string, string | undefined> = {
    CNI_COMMAND: c.command,
    CNI_CONTAINERID: c.containerId ?? t.containerId,
    CNI_NETNS: c.netns ?? t.pod.ns.path,
    CNI_IFNAME: c.ifName ?? 'net1',
    CNI_PATH: '/usr/lib/cni',
    ...c.env,
  };
  for (const k of Object.keys(env)) if (env[k] === undefined) delete env[k];
  const stdin = typeof c.conf === 'string' ? c.conf : JSON.stringify(c.conf);
  const res = await runPlugin(
    routerHandlers(() => t.host.ns),
    { about: 'router test' },
    { env: env as Record<string, string>, stdin: Buffer.from(stdin) },
  );
  const raw = res.stdout;
  return { out: raw.trim() === '' ? undefined : (JSON.parse(raw) as Record<string, unknown>), code: res.exitCode, raw };
}

export function json<T = unknown>(ns: TestNs, cmd: string): T {
  const out = sh(ns, cmd);
  return JSON.parse(out.trim() === '' ? '[]' : out) as T;
}

/** Routes of one table (`ip route show table N` fails for a table that never existed). */
export function tableRoutes(n: TestNs, table: number | 'main', family: 4 | 6 = 4): IpRoute[] {
  return json<IpRoute[]>(n, `ip -${family} -j route show table all`).filter((r) => (r.table ?? 'main') === String(table));
}

/** Real traffic: true when `ping` from `ns` gets a reply. */
export function pings(ns: TestNs, dst: string, from?: string): boolean {
  try {
    sh(ns, `ping ${dst.includes(':') ? '-6 ' : ''}-c1 -W2 ${from ? `-I ${from} ` : ''}${dst} >/dev/null`);
    return true;
  } catch {
    return false;
  }
}

interface IpRoute {
  dst: string;
  dev?: string;
  gateway?: string;
  table?: string;
  protocol?: string;
  metric?: number;
  prefsrc?: string;
  scope?: string;
  flags?: string[];
  type?: string;
}
interface IpRule {
  priority: number;
  src?: string;
  srclen?: number;
  dst?: string;
  dstlen?: number;
  table: string;
}
interface IpNeigh {
  dst: string;
  dev: string;
  lladdr?: string;
  state?: string[];
}

/** Routes of every table, rules and PERMANENT neighbours of a namespace, as sorted lines (leak checks). */
export function snapshot(ns: TestNs): string[] {
  const out: string[] = [];
  for (const fam of ['-4', '-6']) {
    for (const r of json<IpRoute[]>(ns, `ip ${fam} -j route show table all`)) {
      if (r.type === 'multicast' || r.dst.startsWith('fe80:') || r.dst.startsWith('ff00:')) continue;
      out.push(
        `route ${r.type ?? ''} ${r.dst} via ${r.gateway ?? '-'} dev ${r.dev ?? '-'} table ${r.table ?? 'main'} proto ${r.protocol ?? '-'} metric ${r.metric ?? '-'} src ${r.prefsrc ?? '-'} scope ${r.scope ?? '-'} ${(r.flags ?? []).join(',')}`,
      );
    }
    for (const r of json<IpRule[]>(ns, `ip ${fam} -j rule show`)) {
      out.push(
        `rule ${fam} ${r.priority} from ${r.src ?? 'all'}/${r.srclen ?? ''} to ${r.dst ?? 'all'}/${r.dstlen ?? ''} lookup ${r.table}`,
      );
    }
  }
  for (const n of json<IpNeigh[]>(ns, 'ip -j neigh show nud permanent')) out.push(`neigh ${n.dst} dev ${n.dev} lladdr ${n.lladdr ?? '-'}`);
  return out.sort();
}

/** Lines in `after` that are not in `before` (+) and the reverse (-). */
export function diff(before: string[], after: string[]): string[] {
  const b = new Set(before);
  const a = new Set(after);
  return [...after.filter((l) => !b.has(l)).map((l) => `+ ${l}`), ...before.filter((l) => !a.has(l)).map((l) => `- ${l}`)];
}

/** Snapshots host and pod now; the returned function tells what each has changed since ([] and [] when restored). */
export function changesSince(t: Topo): () => { host: string[]; pod: string[] } {
  const host = snapshot(t.host);
  const pod = snapshot(t.pod);
  return () => ({ host: diff(host, snapshot(t.host)), pod: diff(pod, snapshot(t.pod)) });
}

export type { IpRoute, IpRule, IpNeigh };
