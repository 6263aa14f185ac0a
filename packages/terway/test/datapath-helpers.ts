/**
 * Namespaces for the ENI multi-IP datapath: a "host", pods, and an "ext"
 * namespace standing for the VPC. An ENI is a veth whose host end carries
 * the ENI's MAC and whose peer sits in ext with the vSwitch gateway address;
 * ext knows which ENI MAC each pod IP lives behind (as the VPC does).
 *
 *   host: eniN (ENI, MAC 00:16:3e:00:00:0N), lo += 10.6.0.1/32
 *   ext:  vpcN 192.168.N.253/24 (gateway), lo += 10.9.9.9/32 (a VPC peer)
 */
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
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

const TCP_SCRIPT = `
const net = require('node:net');
const [mode, host, port, secs] = process.argv.slice(2);
const dur = Number(secs) * 1000;
if (mode === 'recv') {
  const srv = net.createServer((s) => {
    let t0 = 0, bytes = 0, b1 = 0, t1 = 0;
    s.on('data', (c) => {
      const now = Date.now();
      if (!t0) t0 = now;
      bytes += c.length;
      if (!t1 && now - t0 >= 1000) { t1 = now; b1 = bytes; }
      if (now - t0 >= dur) {
        const bps = ((bytes - b1) * 8 * 1000) / (now - t1);
        process.stdout.write(JSON.stringify({ bps, bytes }) + '\\n');
        s.destroy(); srv.close(); process.exit(0);
      }
    });
  });
  srv.listen(Number(port), host, () => process.stdout.write('ready\\n'));
} else {
  const s = net.connect(Number(port), host);
  const buf = Buffer.alloc(65536, 7);
  const pump = () => { while (s.write(buf)); };
  s.on('connect', pump);
  s.on('drain', pump);
  s.on('error', () => process.exit(0));
  setTimeout(() => process.exit(0), dur + 3000);
}
`;

/**
 * TCP from `from` to `toIp` in `to` for `secs` seconds; the rate measured
 * at the receiver after the first second (tbf bucket and slow start left out), bits/s.
 */
export async function tcpRate(from: TestNs, to: TestNs, toIp: string, secs = 4): Promise<number> {
  const script = path.join(os.tmpdir(), `terway-tcp-${process.pid}.js`);
  fs.writeFileSync(script, TCP_SCRIPT);
  const port = String(20000 + Math.floor(Math.random() * 20000));
  const recv = spawn('ip', ['netns', 'exec', to.name, process.execPath, script, 'recv', toIp, port, String(secs)], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  recv.stderr.on('data', (c: Buffer) => (err += c.toString()));
  const done = new Promise<number>((resolve, reject) => {
    const timer = setTimeout(
      () => {
        recv.kill();
        reject(new Error(`tcpRate: no result after ${secs + 15} s: ${out} ${err}`));
      },
      (secs + 15) * 1000,
    );
    recv.stdout.on('data', (c: Buffer) => {
      out += c.toString();
      const line = out.split('\n').find((l) => l.startsWith('{'));
      if (line) {
        clearTimeout(timer);
        resolve((JSON.parse(line) as { bps: number }).bps);
      }
    });
    recv.on('exit', (code) => {
      if (!out.includes('{')) {
        clearTimeout(timer);
        reject(new Error(`receiver exited ${code}: ${err}`));
      }
    });
  });
  await new Promise<void>((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`receiver not ready: ${err}`)), 10_000);
    recv.stdout.on('data', () => {
      if (out.includes('ready')) {
        clearTimeout(t);
        resolve();
      }
    });
  });
  const send = spawn('ip', ['netns', 'exec', from.name, process.execPath, script, 'send', toIp, port, String(secs)], { stdio: 'ignore' });
  try {
    return await done;
  } finally {
    send.kill();
    recv.kill();
    fs.rmSync(script, { force: true });
  }
}
