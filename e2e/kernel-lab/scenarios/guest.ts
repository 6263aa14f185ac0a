/**
 * Helpers for scenario programs that run inside the lab (bundled by lab.ts, run with the pinned
 * Node in the guest). A scenario is a plain program: it exits 0 when every check passed; it may
 * print `@@RESULT <json>` lines for the host-side test to inspect (parseResults in lab.ts).
 */
import { execFileSync, spawn } from 'node:child_process';
import { cleanupAll } from '@cnikit/netlib-testing';

export class CheckError extends Error {}

/** Throws CheckError(msg) unless cond; the message should say what was expected and what was seen. */
export function check(cond: unknown, msg: string): asserts cond {
  if (!cond) throw new CheckError(msg);
}

/** Prints one result record for the host-side test. */
export function result(key: string, value: unknown): void {
  process.stdout.write(`@@RESULT ${JSON.stringify({ key, value })}\n`);
}

/** Runs a scenario's main: exit 0 on success, 1 with the error (and its cause chain) otherwise; namespaces removed either way. */
export function scenario(main: () => Promise<void>): void {
  main()
    .then(() => {
      cleanupAll();
      process.exit(0);
    })
    .catch((err: unknown) => {
      let e: unknown = err;
      while (e) {
        process.stdout.write(`FAILED: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
        e = e instanceof Error ? e.cause : undefined;
      }
      try {
        cleanupAll();
      } finally {
        process.exit(1);
      }
    });
}

/** A command's stdout (throws with stderr on a non-zero exit). */
export function run(cmd: string, args: string[]): string {
  try {
    return execFileSync(cmd, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  } catch (err) {
    const e = err as { status?: number; stderr?: string };
    throw new Error(`${cmd} ${args.join(' ')}: exit ${e.status}: ${e.stderr ?? ''}`.trim(), { cause: err });
  }
}

const NODE = process.execPath;

/** What the server saw and answered. */
export interface Exchange {
  /** The client's address as the server saw it. */
  peer: string;
  /** What the server received. */
  got: string;
}

const SERVER = `
const net = require('node:net');
const [host, port] = process.argv.slice(1);
const srv = net.createServer((s) => {
  let got = '';
  s.on('data', (d) => { got += d; if (got.endsWith('\\n')) s.end(JSON.stringify({ peer: s.remoteAddress, got: got.trim() }) + '\\n'); });
  s.on('error', () => {});
});
srv.listen(Number(port), host, () => process.stdout.write('LISTENING\\n'));
process.stdin.on('end', () => process.exit(0)).resume();
`;

const CLIENT = `
const net = require('node:net');
const [host, port, msg, timeout] = process.argv.slice(1);
const s = net.connect({ host, port: Number(port) });
let out = '';
s.setTimeout(Number(timeout), () => { process.stderr.write('timeout\\n'); process.exit(3); });
s.on('connect', () => s.write(msg + '\\n'));
s.on('data', (d) => { out += d; });
s.on('end', () => { process.stdout.write(out); process.exit(0); });
s.on('error', (e) => { process.stderr.write(e.code + '\\n'); process.exit(2); });
`;

/**
 * A real TCP exchange: a server in `serverNs` (an `ip netns` name) listening on host:port,
 * a client in `clientNs` connecting to `connectTo` (default host), sending `msg`; returns what
 * the server saw. Rejects when the client fails (with its exit code: 2 error, 3 timeout).
 */
export async function tcpExchange(o: {
  serverNs: string;
  clientNs: string;
  host: string;
  port: number;
  connectTo?: string;
  msg?: string;
  timeoutMs?: number;
}): Promise<Exchange> {
  const server = spawn('ip', ['netns', 'exec', o.serverNs, NODE, '-e', SERVER, o.host, String(o.port)], {
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  try {
    await new Promise<void>((resolve, reject) => {
      let out = '';
      let err = '';
      server.stdout.on('data', (d: Buffer) => {
        out += d.toString();
        if (out.includes('LISTENING')) resolve();
      });
      server.stderr.on('data', (d: Buffer) => (err += d.toString()));
      server.once('exit', (code) => reject(new Error(`server in ${o.serverNs} exited ${code} before listening: ${err}`)));
    });
    const answer = await new Promise<string>((resolve, reject) => {
      const msg = o.msg ?? 'hello';
      const c = spawn('ip', [
        'netns',
        'exec',
        o.clientNs,
        NODE,
        '-e',
        CLIENT,
        o.connectTo ?? o.host,
        String(o.port),
        msg,
        String(o.timeoutMs ?? 10_000),
      ]);
      let out = '';
      let err = '';
      c.stdout.on('data', (d: Buffer) => (out += d.toString()));
      c.stderr.on('data', (d: Buffer) => (err += d.toString()));
      c.once('exit', (code) =>
        code === 0
          ? resolve(out)
          : reject(new Error(`client in ${o.clientNs} -> ${o.connectTo ?? o.host}:${o.port}: exit ${code} ${err.trim()}`)),
      );
    });
    return JSON.parse(answer) as Exchange;
  } finally {
    server.stdin.end();
    server.kill();
  }
}

/** Kernel counters of a link in a namespace (`ip -s`): rx/tx packets. */
export function linkStats(ns: string, dev: string): { rx: number; tx: number } {
  const j = JSON.parse(run('ip', ['-n', ns, '-j', '-s', 'link', 'show', 'dev', dev])) as Array<{
    stats64: { rx: { packets: number }; tx: { packets: number } };
  }>;
  return { rx: j[0]!.stats64.rx.packets, tx: j[0]!.stats64.tx.packets };
}

/** UDP InDatagrams of a namespace (/proc/net/snmp): FoU-received packets count here. */
export function udpInDatagrams(ns: string): number {
  const lines = run('ip', ['netns', 'exec', ns, 'cat', '/proc/net/snmp'])
    .split('\n')
    .filter((l) => l.startsWith('Udp:'));
  const names = lines[0]!.split(/\s+/);
  const values = lines[1]!.split(/\s+/);
  return Number(values[names.indexOf('InDatagrams')]);
}

/** Polls fn until it returns a truthy value; the last error (if any) is in the timeout message. */
export async function waitFor<T>(what: string, fn: () => Promise<T | undefined | false>, timeoutMs: number, everyMs = 200): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await fn();
      if (v) return v;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}${last ? `: ${String(last)}` : ''}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}
