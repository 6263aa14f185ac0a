/**
 * Test helpers for code that touches the kernel: throwaway named namespaces and
 * shell commands run inside them. Free of jest imports, so any test runner (or a
 * script) can use them. Package `@cnikit/netlib-testing`: test support, never bundled into an executable.
 *
 * Namespaces are created with `ip netns add` under unique names (`<prefix>-<random>`),
 * so tests running in parallel, or next to other users of the machine, never collide;
 * cleanupAll() removes only the namespaces this process created.
 */
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import * as path from 'node:path';
import { NETNS_RUN_DIR, execInNetns, openNetns, sysctl, withHostNetns, type Netns } from '@cnikit/netlib';

export { eventually } from './eventually';
export { rejectedWith, thrownBy } from './errors';
export { bundleProgram, serveInTempDir, startListening } from './program';

/** Runs `fn` with hostNetns() answering `ns`: a plugin handler in-process against a test "host". */
export const useHostNetns = withHostNetns;

export interface TestNs {
  /** The `ip netns` name. */
  name: string;
  ns: Netns;
  /** Closes the handle and deletes the namespace (idempotent). */
  cleanup(): void;
}

const created = new Map<string, TestNs>();

function run(cmd: string, args: string[], input?: string): string {
  return execFileSync(cmd, args, { encoding: 'utf8', stdio: ['pipe', 'pipe', 'pipe'], input });
}

/**
 * The IPv4 settings every test namespace starts from. A new namespace copies the host's current
 * `conf/all`, `conf/default` and `ip_forward` (net.core.devconf_inherit_init_net=0), and hosts differ:
 * rp_filter is 0 on Debian, 1 on RHEL, 2 on Ubuntu. Tests start from the kernel's own defaults and
 * set whatever else they rely on themselves, so a result never depends on the machine.
 */
export const BASELINE_SYSCTLS: ReadonlyArray<readonly [string, string]> = [
  ['net/ipv4/ip_forward', '0'],
  ['net/ipv4/conf/all/rp_filter', '0'],
  ['net/ipv4/conf/default/rp_filter', '0'],
  ['net/ipv4/conf/all/arp_ignore', '0'],
  ['net/ipv4/conf/default/arp_ignore', '0'],
  ['net/ipv4/conf/all/arp_announce', '0'],
  ['net/ipv4/conf/default/arp_announce', '0'],
];

/** Creates a named namespace with lo up and BASELINE_SYSCTLS. Call cleanup() (or cleanupAll()) when done. */
export function newNs(prefix = 'nlt'): TestNs {
  const name = `${prefix}-${randomBytes(4).toString('hex')}`;
  run('ip', ['netns', 'add', name]);
  let ns: Netns;
  try {
    run('ip', ['-n', name, 'link', 'set', 'lo', 'up']);
    ns = openNetns(name);
    for (const [key, value] of BASELINE_SYSCTLS) sysctl.set(ns, key, value);
  } catch (err) {
    run('ip', ['netns', 'del', name]);
    throw err;
  }
  const t: TestNs = {
    name,
    ns,
    cleanup() {
      if (!created.delete(name)) return;
      ns.close();
      try {
        run('ip', ['netns', 'del', name]);
      } catch {
        // already gone
      }
    },
  };
  created.set(name, t);
  return t;
}

/** Deletes every namespace newNs() created in this process. */
export function cleanupAll(): void {
  for (const t of [...created.values()]) t.cleanup();
}

/** The `ip netns` name of a handle opened from /var/run/netns (or /run/netns), if it is one. */
function netnsName(ns: Netns | string): string | undefined {
  if (typeof ns === 'string') return ns.includes('/') ? undefined : ns;
  const dir = path.dirname(ns.path);
  return dir === NETNS_RUN_DIR || dir === '/run/netns' ? path.basename(ns.path) : undefined;
}

/**
 * Runs `sh -c cmd` inside a namespace (a handle or an `ip netns` name) and returns
 * stdout; throws (with stderr in the message) on a non-zero exit. Named namespaces
 * go through `ip netns exec`, which also mounts the namespace's own /sys; others
 * through nsenter on the handle's descriptor.
 */
export function sh(ns: Netns | string, cmd: string): string {
  const name = netnsName(ns);
  try {
    if (name) return run('ip', ['netns', 'exec', name, 'sh', '-c', cmd]);
    // Through our own descriptor: the handle's path may mean something else to a child (/proc/thread-self/...).
    return run('nsenter', [`--net=/proc/${process.pid}/fd/${(ns as Netns).fd}`, 'sh', '-c', cmd]);
  } catch (err) {
    const e = err as { stderr?: string; status?: number };
    throw new Error(`sh in ${typeof ns === 'string' ? ns : ns.path}: ${cmd}: exit ${e.status}: ${e.stderr ?? ''}`.trim(), { cause: err });
  }
}

/** Runs `ip -j <args>` inside a namespace and parses its JSON output ([] when it prints nothing). */
export function ipJson<T = Array<Record<string, unknown>>>(ns: Netns | string, args: string): T {
  const out = sh(ns, `ip -j ${args}`).trim();
  return JSON.parse(out === '' ? '[]' : out) as T;
}

/** Runs `tc -j <args>` inside a namespace and parses its JSON output. */
export function tcJson<T = Array<Record<string, unknown>>>(ns: Netns | string, args: string): T {
  const out = sh(ns, `tc -j ${args}`).trim();
  return JSON.parse(out === '' ? '[]' : out) as T;
}

export interface UdpBurst {
  /** Destination address (IPv4 or IPv6). */
  dst: string;
  port?: number;
  count?: number;
  /** Payload bytes per datagram. */
  size?: number;
}

/**
 * Sends `count` UDP datagrams from inside `ns` as fast as possible, with this very
 * Node binary (no ping/iperf needed on the machine). Send errors (a full qdisc
 * answers ENOBUFS) are ignored: the point is to offer traffic. Resolves with the
 * number of datagrams the kernel accepted.
 */
export async function sendUdp(ns: Netns, o: UdpBurst): Promise<number> {
  const script = `
    const s = require('node:dgram').createSocket(${JSON.stringify(o.dst.includes(':') ? 'udp6' : 'udp4')});
    const buf = Buffer.alloc(${o.size ?? 1000});
    let ok = 0, done = 0;
    for (let i = 0; i < ${o.count ?? 10}; i++) s.send(buf, ${o.port ?? 9}, ${JSON.stringify(o.dst)}, (e) => {
      if (!e) ok++;
      if (++done === ${o.count ?? 10}) { s.close(); process.stdout.write(String(ok)); }
    });`;
  const r = await execInNetns(ns, process.execPath, ['-e', script]);
  if (r.code !== 0) throw new Error(`sendUdp in ${ns.path}: exit ${r.code}: ${r.stderr}`);
  return Number(r.stdout);
}

/**
 * Whether a test's prerequisite is there. A missing one never passes silently: under CI=true this throws
 * (the suite fails with `why`); elsewhere the skip is announced on stderr and false is returned.
 */
export function prerequisite(ok: boolean, what: string, why: string): boolean {
  if (ok) return true;
  if (['1', 'true', 'yes'].includes((process.env['CI'] ?? '').toLowerCase()))
    throw new Error(`${what}: ${why} (CI=true: a missing prerequisite fails the tests)`);
  console.warn(`[test] skipping ${what}: ${why} (with CI=true these tests fail instead)`);
  return false;
}
