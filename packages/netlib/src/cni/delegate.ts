/**
 * Running another plugin (an IPAM plugin named by ipam.type) the way
 * libcni's invoke package does: find the binary in CNI_PATH, exec it with
 * our environment but its own CNI_COMMAND, the config on stdin, and read its
 * stdout as a result or an error object.
 *
 * node:child_process is required on first use only: most plugin runs (DEL of
 * a plugin without IPAM, VERSION) never delegate.
 */
import { accessSync, constants as fsConstants, statSync } from 'node:fs';
import { join } from 'node:path';
import type { ChildProcess } from 'node:child_process';
import { CniCode, CniError, ConfigError, PluginNotFoundError, TransientError } from '../errors';
import { trace } from '../log';
import { type NetConf, decodeJson } from './conf';
import { type CniArgs, type EnvSource, formatCniArgs } from './env';
import { type Result, parseResult } from './result';
import type { CniCommand } from './version';

/** The invocation context passed on to the delegate; CmdArgs fits it. */
export interface DelegateArgs {
  containerId?: string;
  netns?: string;
  ifName?: string;
  args?: CniArgs;
  /** CNI_PATH directories searched for the delegate. */
  path: readonly string[];
}

export interface DelegateOptions {
  /** Kill the delegate and fail with code 11 after this long; 0 = never. Default 60000. */
  timeoutMs?: number;
  /** Base environment (default process.env); the CNI_* variables are always set from `args`. */
  env?: EnvSource;
}

/** The config to send: parsed, or the raw stdin bytes (sent unchanged when possible). */
export type DelegateConf = NetConf | Buffer | string;

export const DEFAULT_DELEGATE_TIMEOUT_MS = 60_000;

/** A plugin type must be a bare file name: "../../bin/sh" would escape CNI_PATH. */
function checkPluginName(type: string): void {
  if (typeof type !== 'string' || type === '' || type === '.' || type === '..' || type.includes('/') || type.includes('\0')) {
    throw new ConfigError('ipam.type', 'a plugin binary name without "/"', type);
  }
}

/** Full path of the first executable regular file named `type` in the directories; PluginNotFoundError otherwise. */
export function findPlugin(type: string, dirs: readonly string[]): string {
  checkPluginName(type);
  for (const dir of dirs) {
    const candidate = join(dir, type);
    try {
      if (!statSync(candidate).isFile()) continue;
      accessSync(candidate, fsConstants.X_OK);
      return candidate;
    } catch {
      // absent or not executable here: try the next directory, like $PATH lookup
    }
  }
  throw new PluginNotFoundError(type, dirs);
}

/** ADD on the delegate; its result comes back in the 1.1.0 shape (IPAM results have no interfaces). */
export async function delegateAdd(type: string, conf: DelegateConf, args: DelegateArgs, opts?: DelegateOptions): Promise<Result> {
  const { bytes, version } = prepareConf(conf, true);
  const stdout = await execDelegate(type, 'ADD', bytes, args, opts);
  let raw: unknown;
  try {
    raw = JSON.parse(stdout.toString());
  } catch (err) {
    throw new CniError(
      CniCode.DecodeFailure,
      `failed to decode result of delegate ${type}`,
      `${(err as Error).message}; output ${JSON.stringify(stdout.toString().slice(0, 200))}`,
    );
  }
  const own = (raw as { cniVersion?: unknown } | null)?.cniVersion;
  return parseResult(raw, {
    version: typeof own === 'string' ? own : version,
    field: `result of delegate ${type}`,
    code: CniCode.DecodeFailure,
  });
}

/** DEL on the delegate; it must succeed when there is nothing left to free. */
export async function delegateDel(type: string, conf: DelegateConf, args: DelegateArgs, opts?: DelegateOptions): Promise<void> {
  await execDelegate(type, 'DEL', prepareConf(conf, false).bytes, args, opts);
}

export async function delegateCheck(type: string, conf: DelegateConf, args: DelegateArgs, opts?: DelegateOptions): Promise<void> {
  await execDelegate(type, 'CHECK', prepareConf(conf, false).bytes, args, opts);
}

/** GC on the delegate; the config carries cni.dev/valid-attachments through unchanged. */
export async function delegateGc(type: string, conf: DelegateConf, args: DelegateArgs, opts?: DelegateOptions): Promise<void> {
  await execDelegate(type, 'GC', prepareConf(conf, false).bytes, args, opts);
}

export async function delegateStatus(type: string, conf: DelegateConf, args: DelegateArgs, opts?: DelegateOptions): Promise<void> {
  await execDelegate(type, 'STATUS', prepareConf(conf, false).bytes, args, opts);
}

/**
 * The bytes to send and the config's version. On ADD a prevResult is
 * removed: it is the main plugin's chain input, not something the IPAM
 * plugin should pass through or merge into its own result.
 */
function prepareConf(conf: DelegateConf, stripPrevResult: boolean): { bytes: Buffer; version: string | undefined } {
  const obj = typeof conf === 'string' || Buffer.isBuffer(conf) ? undefined : conf;
  const decoded = obj ?? decodeJson(conf as Buffer | string);
  if (typeof decoded !== 'object' || decoded === null || Array.isArray(decoded)) {
    throw new CniError(CniCode.DecodeFailure, 'failed to decode network config', 'expected a JSON object to pass to the delegate');
  }
  const parsed = decoded as Record<string, unknown>;
  const version = typeof parsed.cniVersion === 'string' ? parsed.cniVersion : undefined;
  if (stripPrevResult && parsed.prevResult !== undefined) {
    const { prevResult: _dropped, ...rest } = parsed;
    return { bytes: Buffer.from(JSON.stringify(rest)), version };
  }
  const bytes = obj ? Buffer.from(JSON.stringify(obj)) : Buffer.isBuffer(conf) ? conf : Buffer.from(conf as string);
  return { bytes, version };
}

/**
 * Runs the delegate and returns its stdout on exit 0. On failure an error
 * object on its stdout comes back as a CniError with the same code, msg and
 * details; otherwise stderr (or the exit status) explains the failure.
 */
export async function execDelegate(
  type: string,
  command: CniCommand,
  stdin: Buffer,
  args: DelegateArgs,
  opts: DelegateOptions = {},
): Promise<Buffer> {
  const bin = findPlugin(type, args.path);
  const env: Record<string, string | undefined> = {
    ...(opts.env ?? process.env),
    CNI_COMMAND: command,
    CNI_CONTAINERID: args.containerId ?? '',
    CNI_NETNS: args.netns ?? '',
    CNI_IFNAME: args.ifName ?? '',
    CNI_ARGS: formatCniArgs(args.args ?? {}),
    CNI_PATH: args.path.join(':'),
  };
  const timeoutMs = opts.timeoutMs ?? DEFAULT_DELEGATE_TIMEOUT_MS;
  const started = Date.now();
  const { spawn } = require('node:child_process') as typeof import('node:child_process');

  const outcome = await new Promise<{
    code: number | null;
    signal: NodeJS.Signals | null;
    stdout: Buffer;
    stderr: Buffer;
    timedOut: boolean;
  }>((resolve, reject) => {
    let child: ChildProcess;
    try {
      child = spawn(bin, [], { env, stdio: ['pipe', 'pipe', 'pipe'] });
    } catch (err) {
      reject(err);
      return;
    }
    const out: Buffer[] = [];
    const errOut: Buffer[] = [];
    let timedOut = false;
    const timer =
      timeoutMs > 0
        ? setTimeout(
            () => {
              timedOut = true;
              child.kill('SIGKILL');
            },
            Math.min(timeoutMs, 2 ** 31 - 1),
          )
        : undefined;
    child.stdout!.on('data', (b: Buffer) => out.push(b));
    child.stderr!.on('data', (b: Buffer) => errOut.push(b));
    // A delegate that exits without reading stdin makes our write fail with EPIPE: its exit status tells the story.
    child.stdin!.on('error', () => undefined);
    child.on('error', (err) => {
      if (timer) clearTimeout(timer);
      reject(new CniError(CniCode.IOFailure, `failed to run delegate ${type}`, `${bin}: ${err.message}`, { cause: err }));
    });
    child.on('close', (code, signal) => {
      if (timer) clearTimeout(timer);
      resolve({ code, signal, stdout: Buffer.concat(out), stderr: Buffer.concat(errOut), timedOut });
    });
    child.stdin!.end(stdin);
  });

  trace('delegate', 'exec', { plugin: type, command, containerId: args.containerId, exitCode: outcome.code, ms: Date.now() - started });
  if (outcome.timedOut) {
    throw new TransientError(`delegate ${type} ${command} timed out`, `killed ${bin} after ${timeoutMs} ms`);
  }
  if (outcome.code === 0) return outcome.stdout;

  const errObj = parseErrorObject(outcome.stdout);
  if (errObj) throw new CniError(errObj.code, errObj.msg, errObj.details);
  const why =
    outcome.stderr.toString().trim() ||
    outcome.stdout.toString().trim() ||
    (outcome.signal ? `killed by ${outcome.signal}` : `exit status ${outcome.code}`);
  throw new CniError(CniCode.Internal, `delegate ${type} ${command} failed`, why);
}

/** The spec's error object, when stdout holds one. */
function parseErrorObject(stdout: Buffer): { code: number; msg: string; details: string } | undefined {
  try {
    const e = JSON.parse(stdout.toString()) as { code?: unknown; msg?: unknown; details?: unknown } | null;
    if (e === null || typeof e !== 'object' || typeof e.code !== 'number') return undefined;
    return { code: e.code, msg: typeof e.msg === 'string' ? e.msg : '', details: typeof e.details === 'string' ? e.details : '' };
  } catch {
    return undefined;
  }
}
