/**
 * Real traffic: ICMP echo with busybox `ping` (statically linked, present on the host through
 * busybox-static and inside the test image), from a namespace or from inside a podman container.
 * All addresses used by the tests are private (10/8, 172.16/12, 192.168/16, fd00::/8) and live
 * inside test namespaces: nothing leaves the machine.
 */
import { ExecResult, run, sleep } from './exec';
import { Netns } from './netns';
import { busyboxPath } from './paths';

/** Something that can run a command with the network of a pod: a namespace or a running container. */
export interface NetworkEndpoint {
  readonly label: string;
  execIn(argv: readonly string[], opts?: { timeoutMs?: number }): Promise<ExecResult>;
}

export function nsEndpoint(ns: Netns): NetworkEndpoint {
  return {
    label: ns.name,
    execIn: (argv, opts) =>
      ns.exec(argv[0] === 'ping' || argv[0] === 'nc' ? [busyboxPath(), ...argv] : argv, { timeoutMs: opts?.timeoutMs ?? 30_000 }),
  };
}

const endpoint = (who: Netns | NetworkEndpoint): NetworkEndpoint => (who instanceof Netns ? nsEndpoint(who) : who);

export interface PingOptions {
  count?: number;
  /** seconds to wait for each reply */
  waitS?: number;
  /** source address (`ping -I <addr>`) */
  from?: string;
  /** attempts before giving up (ARP/NDP resolution and IPv6 DAD can eat the first replies) */
  attempts?: number;
}

/** Pings once (with `count` packets); true when at least one reply came back. */
export async function tryPing(
  who: Netns | NetworkEndpoint,
  ip: string,
  opts: PingOptions = {},
): Promise<{ ok: boolean; result: ExecResult }> {
  const count = opts.count ?? 1;
  const waitS = opts.waitS ?? 1;
  const argv = ['ping', ...(ip.includes(':') ? ['-6'] : ['-4']), '-c', String(count), '-W', String(waitS), '-w', String(count * waitS + 1)];
  if (opts.from) argv.push('-I', opts.from);
  argv.push(ip);
  const result = await endpoint(who).execIn(argv, { timeoutMs: (count * waitS + 10) * 1000 });
  const m = /(\d+) packets received/.exec(result.stdout);
  return { ok: result.code === 0 && !!m && Number(m[1]) > 0, result };
}

/** Real traffic must get through: retries a few times, then throws with ping's output. */
export async function ping(who: Netns | NetworkEndpoint, ip: string, opts: PingOptions = {}): Promise<void> {
  const attempts = opts.attempts ?? 5;
  let last: ExecResult | undefined;
  for (let i = 0; i < attempts; i++) {
    const { ok, result } = await tryPing(who, ip, opts);
    if (ok) return;
    last = result;
    await sleep(500);
  }
  throw new Error(
    `ping ${ip} from ${endpoint(who).label}${opts.from ? ` (source ${opts.from})` : ''} failed after ${attempts} attempts:\n${last?.stdout}${last?.stderr}`,
  );
}

/** Traffic must NOT get through (a negative control): one short attempt; throws if a reply arrives. */
export async function noPing(who: Netns | NetworkEndpoint, ip: string, opts: PingOptions = {}): Promise<void> {
  const { ok, result } = await tryPing(who, ip, { count: 2, waitS: 1, ...opts });
  if (ok) throw new Error(`ping ${ip} from ${endpoint(who).label} unexpectedly succeeded:\n${result.stdout}`);
}

/** Convenience for scripts run as `sh -c` inside a namespace (no shell on the host side). */
export async function shIn(ns: Netns, script: string): Promise<ExecResult> {
  return run(['ip', 'netns', 'exec', ns.name, 'sh', '-c', script]);
}
