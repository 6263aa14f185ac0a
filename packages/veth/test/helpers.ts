/**
 * Test topology for the veth plugin, in the pattern of the reference plugins:
 * a "host" netns and a "container" netns per test, the plugin run in-process
 * with the host netns standing in for the machine's own.
 *
 *   host netns: br0 10.6.0.1/16 fd00:6::1/64 (macvlan parent), lo += 10.96.0.10 (a "Service")
 *   pod netns:  eth0 = macvlan of br0, 10.6.1.5/16 (+ fd00:6::15/64), default via 10.6.0.254
 */
import * as path from 'node:path';
import * as os from 'node:os';
import { runPlugin, type PluginHandlers } from '@cnikit/netlib';
import { newNs as newTestNs, sh as shIn, useHostNetns } from '@cnikit/netlib-testing';
import * as handlers from '../src/plugin';

export const VERSIONS = ['0.3.0', '0.3.1', '0.4.0', '1.0.0', '1.1.0'] as const;

/** A test namespace: its `ip netns` name, its path (what CNI_NETNS carries) and the handle. */
export interface TestNs {
  name: string;
  path: string;
  ns: ReturnType<typeof newTestNs>['ns'];
  cleanup(): Promise<void>;
}

async function newNs(prefix: string): Promise<TestNs> {
  const t = newTestNs(prefix);
  return { name: t.name, path: t.ns.path, ns: t.ns, cleanup: async () => t.cleanup() };
}

/** Runs a shell command in a test namespace; throws on a non-zero exit. */
export async function sh(ns: TestNs, cmd: string): Promise<string> {
  return shIn(ns.ns, cmd);
}

export interface Topo {
  host: TestNs;
  pod: TestNs;
  containerId: string;
  cleanup(): Promise<void>;
}

let seq = 0;

export async function makeTopo(opts: { v6?: boolean } = {}): Promise<Topo> {
  const host = await newNs('vh');
  const pod = await newNs('vp');
  const containerId = `c${process.pid.toString(16)}${(seq++).toString(16).padStart(4, '0')}abcdef`;
  await sh(
    host,
    'ip link add br0 type bridge && ip link set br0 up && ip addr add 10.6.0.1/16 dev br0 && ip addr add 10.96.0.10/32 dev lo',
  );
  await sh(host, `ip link add mv0 link br0 type macvlan mode bridge && ip link set mv0 netns ${pod.name}`);
  await sh(
    pod,
    'ip link set mv0 name eth0 && ip addr add 10.6.1.5/16 dev eth0 && ip link set eth0 up && ip route add default via 10.6.0.254 dev eth0 onlink',
  );
  if (opts.v6) {
    await sh(
      host,
      'sysctl -qw net.ipv6.conf.all.disable_ipv6=0 && ip addr add fd00:6::1/64 dev br0 nodad && ip addr add fd00:96::10/128 dev lo',
    );
    await sh(pod, 'sysctl -qw net.ipv6.conf.all.disable_ipv6=0 && ip addr add fd00:6::15/64 dev eth0 nodad');
  }
  return {
    host,
    pod,
    containerId,
    async cleanup() {
      await pod.cleanup();
      await host.cleanup();
    },
  };
}

/** Adds a second macvlan NIC `net1` in another subnet (10.7.0.0/16 on br1) to the pod. */
export async function addNet1(t: Topo, opts: { v6?: boolean } = {}): Promise<void> {
  await sh(t.host, 'ip link add br1 type bridge && ip link set br1 up && ip addr add 10.7.0.1/16 dev br1');
  await sh(t.host, `ip link add mv1 link br1 type macvlan mode bridge && ip link set mv1 netns ${t.pod.name}`);
  await sh(
    t.pod,
    'ip link set mv1 name net1 && ip addr add 10.7.1.5/16 dev net1 && ip link set net1 up && ip route add 10.8.0.0/16 via 10.7.0.254 dev net1 onlink',
  );
  if (opts.v6) {
    await sh(t.host, 'ip addr add fd00:7::1/64 dev br1 nodad');
    await sh(t.pod, 'ip addr add fd00:7::15/64 dev net1 nodad');
  }
}

export function prevResult(
  version: string,
  ifName: string,
  ips: { address: string; gateway?: string }[],
  podNsPath: string,
): Record<string, unknown> {
  const old = version.startsWith('0.');
  return {
    cniVersion: version,
    interfaces: [{ name: ifName, mac: '02:00:00:00:00:01', sandbox: podNsPath }],
    ips: ips.map((i) => ({ ...(old ? { version: i.address.includes(':') ? '6' : '4' } : {}), ...i, interface: 0 })),
    routes: [{ dst: '0.0.0.0/0', gw: '10.6.0.254' }],
  };
}

export interface Call {
  command: 'ADD' | 'DEL' | 'CHECK' | 'GC' | 'STATUS' | 'VERSION';
  conf: Record<string, unknown>;
  containerId?: string;
  netns?: string;
  ifName?: string;
}

/** Runs the plugin in-process with the test's host netns as the plugin's host. */
export async function call(t: Topo, c: Call): Promise<{ out: Record<string, unknown> | undefined; code: number; raw: string }> {
  const env: Record<string, string> = {
    CNI_COMMAND: c.command,
    CNI_CONTAINERID: c.containerId ?? t.containerId,
    CNI_NETNS: c.netns ?? t.pod.path,
    CNI_IFNAME: c.ifName ?? 'eth0',
    CNI_PATH: '/usr/lib/cni',
  };
  const res = await useHostNetns(t.host.ns, () =>
    runPlugin(handlers as PluginHandlers, { about: 'veth test' }, { env, stdin: Buffer.from(JSON.stringify(c.conf)) }),
  );
  const raw = res.stdout;
  return { out: raw.trim() === '' ? undefined : (JSON.parse(raw) as Record<string, unknown>), code: res.exitCode, raw };
}

export function vethConf(
  version: string,
  prev: Record<string, unknown> | undefined,
  extra: Record<string, unknown> = {},
): Record<string, unknown> {
  return {
    cniVersion: version,
    name: 'mv-veth',
    type: 'veth',
    overlay_hijack_subnet: ['10.244.0.0/16'],
    service_hijack_subnet: ['10.96.0.0/12'],
    log_options: { log_file: path.join(os.tmpdir(), 'cnikit-test-veth.log') },
    ...(prev ? { prevResult: prev } : {}),
    ...extra,
  };
}

export async function json<T = unknown>(ns: TestNs, cmd: string): Promise<T> {
  const out = await sh(ns, cmd);
  return JSON.parse(out.trim() === '' ? '[]' : out) as T;
}

/** Another "host" on the pod's L2 segment: a macvlan of br0 in a namespace of its own, holding `cidr`. */
export async function makeRogue(t: Topo, cidr: string): Promise<string> {
  const rogue = await newNs('vr');
  const prevCleanup = t.cleanup;
  t.cleanup = async () => {
    await rogue.cleanup();
    await prevCleanup();
  };
  await sh(t.host, `ip link add rogue link br0 type macvlan mode bridge && ip link set rogue netns ${rogue.name}`);
  await sh(rogue, `ip addr add ${cidr} dev rogue && ip link set rogue up`);
  return 'ok';
}
