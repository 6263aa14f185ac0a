/**
 * Namespaces for the ENI multi-IP datapath: a "host", pods, and an "ext"
 * namespace standing for the VPC. An ENI is a veth whose host end carries
 * the ENI's MAC and whose peer sits in ext with the vSwitch gateway address;
 * ext knows which ENI MAC each pod IP lives behind (as the VPC does).
 *
 *   host: eniN (ENI, MAC 00:16:3e:00:00:0N), lo += 10.6.0.1/32
 *   ext:  vpcN 192.168.N.253/24 (gateway), lo += 10.9.9.9/32 (a VPC peer)
 */
import { execFileSync } from 'node:child_process';
import { newNs, sh } from '@cnikit/netlib-testing';

export type TestNs = ReturnType<typeof newNs>;

export interface Topo {
  host: TestNs;
  ext: TestNs;
  pods: TestNs[];
  cleanup(): void;
}

export function eniMac(n: number): string {
  return `00:16:3e:00:00:${n.toString(16).padStart(2, '0')}`;
}

export function makeTopo(pods = 1): Topo {
  const host = newNs('twh');
  const ext = newNs('twx');
  const ps = Array.from({ length: pods }, () => newNs('twp'));
  sh(host.ns, 'ip addr add 10.6.0.1/32 dev lo');
  sh(ext.ns, 'ip addr add 10.9.9.9/32 dev lo');
  return {
    host,
    ext,
    pods: ps,
    cleanup() {
      for (const p of ps) p.cleanup();
      ext.cleanup();
      host.cleanup();
    },
  };
}

/** Plugs ENI number n (vSwitch 192.168.n.0/24) into the host. */
export function plugEni(t: Topo, n: number): { mac: string; gateway: string; cidr: string } {
  sh(t.host.ns, `ip link add eni${n} address ${eniMac(n)} type veth peer name vpc${n} netns ${t.ext.name}`);
  sh(t.ext.ns, `ip addr add 192.168.${n}.253/24 dev vpc${n} && ip link set vpc${n} up`);
  return { mac: eniMac(n), gateway: `192.168.${n}.253`, cidr: `192.168.${n}.0/24` };
}

/** The VPC learns that `ip` lives behind ENI n. */
export function vpcLearn(t: Topo, n: number, ipAddr: string): void {
  sh(t.ext.ns, `ip neigh replace ${ipAddr} lladdr ${eniMac(n)} dev vpc${n} nud permanent`);
}

export function ipj<T = Record<string, unknown>[]>(ns: TestNs, args: string): T {
  const out = sh(ns.ns, `ip -j ${args}`);
  return JSON.parse(out.trim() === '' ? '[]' : out) as T;
}

/**
 * Sends `count` UDP datagrams of `size` bytes from `from` to `toIp` as fast as the socket takes them
 * (port 9, discard: nobody needs to listen). 2000 x 1400 bytes is many times a tbf's bucket and queue
 * at the rates tested, so a shaper in the path must drop, however slowly the machine sends.
 */
export function udpBurst(from: TestNs, toIp: string, count = 2000, size = 1400): void {
  const script = `const d = require('node:dgram').createSocket('udp4'); const buf = Buffer.alloc(${size}); let left = ${count};
for (let i = 0; i < ${count}; i++) d.send(buf, 9, '${toIp}', () => { if (--left === 0) d.close(); });`;
  execFileSync('ip', ['netns', 'exec', from.name, process.execPath, '-e', script], {
    stdio: ['ignore', 'ignore', 'pipe'],
    timeout: 60_000,
  });
}

export interface TbfStats {
  kind: string;
  options: { rate: number; burst: number; lat: number };
  bytes: number;
  packets: number;
  drops: number;
  overlimits: number;
}

/** The root qdisc of a device with its counters (`tc -s -j`). */
export function rootQdisc(ns: TestNs, dev: string): TbfStats {
  const all = JSON.parse(sh(ns.ns, `tc -s -j qdisc show dev ${dev}`)) as (TbfStats & { root?: boolean })[];
  const root = all.find((q) => q.root);
  if (!root) throw new Error(`no root qdisc on ${dev}: ${JSON.stringify(all)}`);
  return root;
}
