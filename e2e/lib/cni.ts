/**
 * Driving CNI plugins: conflists in a temp NETCONFPATH, cnitool (libcni's own client) run inside the
 * node namespace, and direct plugin execution with hand-made env + stdin for bad-input tests.
 *
 * cnitool keeps libcni's result cache in /var/lib/cni/results (it has no option to move it); entries
 * are removed by DEL. host-local leases go to the `dataDir` our conflists set (a temp dir).
 */
import { createHash } from 'node:crypto';
import { mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ExecResult, run } from './exec';
import { Netns } from './netns';
import { CNI_PATH, cnitoolPath } from './paths';

export type Conflist = { cniVersion: string; name: string; plugins: Record<string, unknown>[]; [k: string]: unknown };

/** Writes `<dir>/<name>.conflist` (the name libcni and podman look networks up by) and returns its path. */
export function writeConflist(dir: string, conflist: Conflist): string {
  mkdirSync(dir, { recursive: true });
  const file = join(dir, `${conflist.name}.conflist`);
  writeFileSync(file, JSON.stringify(conflist, null, 2));
  return file;
}

/** Addresses host-local has leased in network `net` under `dataDir` (one file per address). */
export function hostLocalLeases(dataDir: string, net: string): string[] {
  try {
    return readdirSync(join(dataDir, net)).filter((f) => !f.startsWith('last_reserved_ip') && f !== 'lock');
  } catch {
    return [];
  }
}

/** A temp directory per test file: `confDir` (NETCONFPATH), `ipamDir` (host-local dataDir), `logDir`. */
export class CniDirs {
  readonly root = mkdtempSync(join(tmpdir(), 'cnikit-e2e-cni-'));
  readonly confDir = join(this.root, 'net.d');
  readonly ipamDir = join(this.root, 'ipam');
  readonly logDir = join(this.root, 'log');
  constructor() {
    for (const d of [this.confDir, this.ipamDir, this.logDir]) mkdirSync(d, { recursive: true });
  }
  writeConflist(c: Conflist): string {
    return writeConflist(this.confDir, c);
  }
  /** host-local leases currently held in network `net` (file names are the addresses). */
  leases(net: string): string[] {
    return hostLocalLeases(this.ipamDir, net);
  }
  remove(): void {
    rmSync(this.root, { recursive: true, force: true });
  }
}

export interface CnitoolOptions {
  /** the "node": cnitool (and so every plugin) runs inside this namespace */
  node: Netns;
  confDir: string;
  ifname?: string;
  /** CAP_ARGS: capability args passed as runtimeConfig */
  capArgs?: Record<string, unknown>;
  /** CNI_ARGS, as `K=V;K=V` or a map */
  args?: string | Record<string, string>;
  cniPath?: string;
  timeoutMs?: number;
}

export interface CnitoolResult extends ExecResult {
  /** parsed stdout when it is JSON (ADD prints the result) */
  json?: any; // eslint-disable-line @typescript-eslint/no-explicit-any
}

/**
 * `cnitool <cmd> <netName> <netnsPath>` inside `node`. Does not throw: check `code`.
 * The container ID is derived by cnitool from the netns path ("cnitool-" + 20 hex digits).
 */
export async function cnitool(
  cmd: 'add' | 'del' | 'check' | 'gc' | 'status',
  netName: string,
  netnsPath: string,
  opts: CnitoolOptions,
): Promise<CnitoolResult> {
  const args =
    typeof opts.args === 'object'
      ? Object.entries(opts.args)
          .map(([k, v]) => `${k}=${v}`)
          .join(';')
      : opts.args;
  const env: Record<string, string> = {
    PATH: process.env.PATH ?? '/usr/sbin:/usr/bin:/sbin:/bin',
    NETCONFPATH: opts.confDir,
    CNI_PATH: opts.cniPath ?? CNI_PATH,
  };
  if (opts.capArgs) env.CAP_ARGS = JSON.stringify(opts.capArgs);
  if (args) env.CNI_ARGS = args;
  if (opts.ifname) env.CNI_IFNAME = opts.ifname;
  const argv = [
    'ip',
    'netns',
    'exec',
    opts.node.name,
    'env',
    '-i',
    ...Object.entries(env).map(([k, v]) => `${k}=${v}`),
    cnitoolPath(),
    cmd,
    netName,
    netnsPath,
  ];
  const r: CnitoolResult = await run(argv, { timeoutMs: opts.timeoutMs ?? 60_000 });
  const out = r.stdout.trim();
  if (out.startsWith('{')) {
    try {
      r.json = JSON.parse(out);
    } catch {
      /* not JSON after all */
    }
  }
  return r;
}

/** Like cnitool() but throws with cnitool's output when the exit code is not 0. */
export async function cnitoolOk(...a: Parameters<typeof cnitool>): Promise<CnitoolResult> {
  const r = await cnitool(...a);
  if (r.code !== 0) throw new Error(`cnitool ${a[0]} ${a[1]} ${a[2]} failed (exit ${r.code}):\n${r.stdout}${r.stderr}`);
  return r;
}

/** The container ID cnitool derives for a netns path (sha512 of the path, first 10 bytes, hex). */
export function cnitoolContainerId(netnsPath: string): string {
  return `cnitool-${createHash('sha512').update(netnsPath).digest('hex').slice(0, 20)}`;
}

export interface PluginEnv {
  CNI_COMMAND?: string;
  CNI_CONTAINERID?: string;
  CNI_NETNS?: string;
  CNI_IFNAME?: string;
  CNI_ARGS?: string;
  CNI_PATH?: string;
  [k: string]: string | undefined;
}

export interface PluginResult extends ExecResult {
  /** stdout parsed as JSON (a result or an error object), if it is JSON */
  json?: any; // eslint-disable-line @typescript-eslint/no-explicit-any
}

/**
 * Runs a plugin binary directly, the way a runtime does: env vars + config on stdin, inside `node`
 * (or the current namespace when `node` is omitted: only for commands that touch no namespace).
 * The environment is exactly `env` plus PATH: nothing leaks in from the test process.
 */
export async function execPlugin(binary: string, env: PluginEnv, stdin: string | object, node?: Netns): Promise<PluginResult> {
  const e: Record<string, string> = { PATH: '/usr/sbin:/usr/bin:/sbin:/bin' };
  for (const [k, v] of Object.entries(env)) if (v !== undefined) e[k] = v;
  const input = typeof stdin === 'string' ? stdin : JSON.stringify(stdin);
  const argv = node ? ['ip', 'netns', 'exec', node.name, 'env', '-i', ...Object.entries(e).map(([k, v]) => `${k}=${v}`), binary] : [binary];
  const r: PluginResult = await run(argv, { input, env: e, cleanEnv: true, timeoutMs: 60_000 });
  const out = r.stdout.trim();
  if (out) {
    try {
      r.json = JSON.parse(out);
    } catch {
      /* left undefined: callers assert on it */
    }
  }
  return r;
}
