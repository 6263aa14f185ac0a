/**
 * Named network namespaces for tests. The harness never changes the machine's own namespace:
 * every `ip` call names a namespace (`ip -n <ns>`), every command that must run "on the node" runs
 * through `ip netns exec <ns>` (or, for podman, `nsenter --net=`; see podman.ts).
 *
 * Names are `cke<run>-<role><n>`: <run> identifies the test run (set by global-setup.ts), so the
 * global teardown, and the next run after a crash, can remove whatever a run left behind.
 */
import { readdirSync } from 'node:fs';
import { BASELINE_SYSCTLS } from '@cnikit/netlib-testing';
import { ExecResult, run, runOk, RunOptions } from './exec';

export const NETNS_DIR = '/run/netns';
export const NAME_PREFIX = 'cke';

export function runId(): string {
  if (!process.env.CNIKIT_E2E_RUN_ID) process.env.CNIKIT_E2E_RUN_ID = process.pid.toString(36);
  return process.env.CNIKIT_E2E_RUN_ID;
}

let counter = 0;
const live = new Set<Netns>();

export class Netns {
  private constructor(readonly name: string) {}

  /** /run/netns/<name>: what CNI_NETNS and cnitool take. */
  get path(): string {
    return `${NETNS_DIR}/${this.name}`;
  }

  /**
   * A new, empty namespace with `lo` up and the kernel's default IPv4 settings (BASELINE_SYSCTLS:
   * a new namespace copies the host's rp_filter and ip_forward, which differ between distributions).
   * `role` is a short word that shows up in the name.
   */
  static async create(role: string): Promise<Netns> {
    const ns = new Netns(`${NAME_PREFIX}${runId()}-${role}${++counter}`);
    await runOk(['ip', 'netns', 'add', ns.name]);
    live.add(ns);
    await ns.ip('link', 'set', 'lo', 'up');
    const writes = BASELINE_SYSCTLS.map(([key, value]) => `echo ${value} > /proc/sys/${key}`).join(' && ');
    await runOk(['ip', 'netns', 'exec', ns.name, 'sh', '-c', writes]);
    return ns;
  }

  /** A namespace made by someone else (e.g. podman's /run/netns/netns-<uuid>): never deleted by us. */
  static existing(name: string): Netns {
    return new Netns(name);
  }

  /** `ip -n <ns> <args>`; throws on failure; returns stdout. */
  ip(...args: string[]): Promise<string> {
    return runOk(['ip', '-n', this.name, ...args]);
  }

  /** `ip -n <ns> -j <args>` parsed (empty output = []). */
  async ipJson<T = Record<string, unknown>>(...args: string[]): Promise<T[]> {
    const out = (await runOk(['ip', '-n', this.name, '-j', ...args])).trim();
    return out ? (JSON.parse(out) as T[]) : [];
  }

  /** Runs argv inside the namespace (`ip netns exec`, which also mounts a matching /sys). */
  exec(argv: readonly string[], opts: RunOptions = {}): Promise<ExecResult> {
    return run(['ip', 'netns', 'exec', this.name, ...argv], opts);
  }

  execOk(argv: readonly string[], opts: RunOptions = {}): Promise<string> {
    return runOk(['ip', 'netns', 'exec', this.name, ...argv], opts);
  }

  /** A sysctl of this namespace, e.g. `net/ipv4/conf/all/rp_filter`. */
  async sysctl(key: string): Promise<string> {
    return (await this.execOk(['cat', `/proc/sys/${key.replace(/\./g, '/')}`])).trim();
  }

  async exists(): Promise<boolean> {
    return (await run(['ip', 'netns', 'pids', this.name])).code === 0;
  }

  async delete(): Promise<void> {
    live.delete(this);
    // kill anything still running inside (a leftover `nc -l`, a ping), then remove the namespace
    const pids = (await run(['ip', 'netns', 'pids', this.name])).stdout.split(/\s+/).filter(Boolean);
    for (const pid of pids) await run(['kill', '-9', pid]);
    await run(['ip', 'netns', 'del', this.name]);
  }
}

/** Deletes every namespace this process created and has not deleted yet (use in afterAll/afterEach). */
export async function deleteAllNamespaces(): Promise<void> {
  for (const ns of [...live].reverse()) await ns.delete();
}

/**
 * Removes namespaces left by test runs: those of `run` (default: every run whose id is not a live
 * process). Used by the global setup and teardown.
 */
export async function reapNamespaces(onlyRun?: string): Promise<string[]> {
  let names: string[];
  try {
    names = readdirSync(NETNS_DIR);
  } catch {
    return [];
  }
  const removed: string[] = [];
  for (const name of names) {
    const m = new RegExp(`^${NAME_PREFIX}([0-9a-z]+)-`).exec(name);
    if (!m) continue;
    const id = m[1]!;
    if (onlyRun !== undefined ? id !== onlyRun : processAlive(parseInt(id, 36))) continue;
    const pids = (await run(['ip', 'netns', 'pids', name])).stdout.split(/\s+/).filter(Boolean);
    for (const pid of pids) await run(['kill', '-9', pid]);
    await run(['ip', 'netns', 'del', name]);
    removed.push(name);
  }
  return removed;
}

function processAlive(pid: number): boolean {
  if (!Number.isFinite(pid) || pid <= 0) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}
