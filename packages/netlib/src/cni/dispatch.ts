/**
 * The plugin entry point: environment + stdin in, one verb handler called,
 * result or error object out, as skel does for Go plugins.
 *
 * runPlugin() does all the work on explicit inputs and returns what to
 * print, so tests run a plugin in-process; pluginMain() binds it to the real
 * process (env, fd 0/1/2, exit code).
 */
import { readSync, writeSync } from 'node:fs';
import { CniCode, CniError } from '../errors';
import { trace } from '../log';
import { allowBlockingSockets } from '../unix/mode';
import { recordCall } from './calls';
import { type NetConf, decodeJson, validateNetConf } from './conf';
import { type CniEnv, type EnvSource, parseCommand, parseEnv } from './env';
import { type Result, convertResult } from './result';
import { type CniCommand, SUPPORTED_VERSIONS, assertVersionAllows, highestVersion, isSupportedVersion } from './version';

/** What every handler receives: the environment, and the config. */
export interface CmdArgs extends CniEnv {
  /** The raw config bytes, passed on whole to delegates. */
  stdin: Buffer;
  /** The raw parsed config with its basics checked (cniVersion, name, type, ...). */
  conf: NetConf;
}

type MaybePromise<T> = T | Promise<T>;

export interface PluginHandlers {
  /** Returns the result in the 1.1.0 shape; the dispatcher converts it to the config's version. */
  add(args: CmdArgs): MaybePromise<Result>;
  del(args: CmdArgs): MaybePromise<void>;
  /** Without it CHECK answers code 1, as skel does for a plugin whose versions do not allow CHECK. */
  check?(args: CmdArgs): MaybePromise<void>;
  /** Without it GC succeeds: a plugin that keeps no state has nothing to collect. */
  gc?(args: CmdArgs): MaybePromise<void>;
  /** Without it STATUS succeeds: nothing the plugin depends on can be unavailable. */
  status?(args: CmdArgs): MaybePromise<void>;
}

export interface PluginOptions {
  /** Spec versions the plugin accepts; default all of SUPPORTED_VERSIONS. */
  versions?: readonly string[];
  /** One line printed to stderr when the binary runs without CNI_COMMAND ("veth: CNI plugin v0.1.0"). */
  about: string;
}

export interface PluginIo {
  env: EnvSource;
  /** The config bytes, or a function reading them (called only for verbs that need stdin). */
  stdin: Buffer | string | (() => Buffer | string);
}

export interface PluginOutput {
  stdout: string;
  stderr: string;
  exitCode: 0 | 1;
  /** The config's `type` (the plugin as the runtime called it), once the config was read: the call log's key. */
  type?: string;
}

/** The error object of the spec, printed on stdout with exit code 1. */
export interface ErrorObject {
  cniVersion: string;
  code: number;
  msg: string;
  details: string;
}

/** Turns anything thrown into the spec's error object; non-CniErrors become code 999 with their message. */
export function toErrorObject(err: unknown, cniVersion: string): ErrorObject {
  if (err instanceof CniError) return { cniVersion, code: err.code, msg: err.msg, details: err.details };
  const msg = err instanceof Error ? err.message : String(err);
  return { cniVersion, code: CniCode.Internal, msg, details: '' };
}

/** JSON as Go's skel prints it (4-space indent), plus a final newline. */
function render(value: unknown): string {
  return `${JSON.stringify(value, null, 4)}\n`;
}

function assertDeclaredVersions(versions: readonly string[]): void {
  const undeclared = versions.filter((v) => !isSupportedVersion(v));
  if (versions.length === 0 || undeclared.length > 0) {
    throw new Error(
      `plugin declares versions netlib does not support: ${JSON.stringify(undeclared)} (supported ${JSON.stringify(SUPPORTED_VERSIONS)})`,
    );
  }
}

/** VERSION: the runtime's stdin is {"cniVersion": ...}; answered in that version when we speak it, whatever stdin holds. */
function versionReply(io: PluginIo, versions: readonly string[], fallback: string): PluginOutput {
  let asked: string | undefined;
  try {
    asked = peekVersion(readStdin(io.stdin));
  } catch {
    asked = undefined;
  }
  const cniVersion = asked !== undefined && versions.includes(asked) ? asked : fallback;
  return { stdout: render({ cniVersion, supportedVersions: [...versions] }), stderr: '', exitCode: 0 };
}

/**
 * The verb's arguments: stdin JSON (code 6, reported after the env check), the env variables (code 4), the
 * config (codes 7 and 1). `reply.version` follows the config's version as soon as it is known and spoken.
 */
function readArgs(io: PluginIo, versions: readonly string[], reply: { version: string }): CmdArgs {
  const stdin = readStdin(io.stdin);
  let raw: unknown;
  let decodeError: unknown;
  try {
    raw = decodeJson(stdin);
    const v = (raw as { cniVersion?: unknown } | null)?.cniVersion;
    if (typeof v === 'string' && versions.includes(v)) reply.version = v;
  } catch (err) {
    decodeError = err;
  }
  const env = parseEnv(io.env);
  if (decodeError !== undefined) throw decodeError;
  const conf = validateNetConf(raw, { versions });
  reply.version = conf.cniVersion;
  return { ...env, stdin, conf };
}

/** Runs the verb's handler; ADD's result, converted to the config's version, is the only output. */
async function callHandler(command: CniCommand, handlers: PluginHandlers, args: CmdArgs, about: string): Promise<string> {
  switch (command) {
    case 'ADD': {
      const result = await handlers.add(args);
      if (typeof result !== 'object' || result === null) throw new Error(`ADD handler returned ${String(result)} instead of a result`);
      return render(convertResult(result, args.conf.cniVersion));
    }
    case 'DEL':
      await handlers.del(args);
      break;
    case 'CHECK':
      if (!handlers.check)
        throw new CniError(CniCode.IncompatibleVersion, 'plugin does not allow CHECK', `${about || args.conf.type} implements no CHECK`);
      await handlers.check(args);
      break;
    case 'GC':
      await handlers.gc?.(args);
      break;
    case 'STATUS':
      await handlers.status?.(args);
      break;
  }
  return '';
}

/**
 * Runs one CNI invocation. Order of checks: CNI_COMMAND (code 4; VERSION
 * answers here), stdin JSON (code 6, reported after the env check), the other
 * env variables of the verb (code 4), the config (codes 7 and 1), the verb
 * against the config's version (code 1), then the handler.
 */
export async function runPlugin(handlers: PluginHandlers, opts: PluginOptions, io: PluginIo): Promise<PluginOutput> {
  const versions = opts.versions ?? SUPPORTED_VERSIONS;
  // Until the config is read, errors carry the plugin's newest version.
  const reply = { version: highestVersion(versions) };
  const started = Date.now();
  let command: CniCommand | undefined;
  let type: string | undefined;
  try {
    assertDeclaredVersions(versions);
    try {
      command = parseCommand(io.env);
    } catch (err) {
      // Run by hand without CNI_COMMAND: say what this binary is, like skel.
      if ((io.env.CNI_COMMAND ?? '') === '' && opts.about !== '') {
        return { stdout: '', stderr: `${opts.about}\nCNI protocol versions supported: ${versions.join(', ')}\n`, exitCode: 0 };
      }
      throw err;
    }
    if (command === 'VERSION') return versionReply(io, versions, reply.version);
    const args = readArgs(io, versions, reply);
    type = typeof args.conf.type === 'string' ? args.conf.type : undefined;
    assertVersionAllows(command, args.conf.cniVersion);
    trace('cni', 'dispatch', { command, containerId: args.containerId, ifName: args.ifName, cniVersion: args.conf.cniVersion });
    const stdout = await callHandler(command, handlers, args, opts.about);
    trace('cni', 'done', { command, containerId: args.containerId, ms: Date.now() - started });
    return { stdout, stderr: '', exitCode: 0, type };
  } catch (err) {
    const obj = toErrorObject(err, reply.version);
    trace('cni', 'failed', { command, ms: Date.now() - started, ...obj, error: err });
    return { stdout: render(obj), stderr: '', exitCode: 1, type };
  }
}

function readStdin(src: PluginIo['stdin']): Buffer {
  let data: Buffer | string;
  try {
    data = typeof src === 'function' ? src() : src;
  } catch (err) {
    throw new CniError(CniCode.IOFailure, 'failed to read the network config from stdin', (err as Error).message, { cause: err });
  }
  return typeof data === 'string' ? Buffer.from(data) : data;
}

/** cniVersion of a VERSION request; VERSION must answer even when stdin is empty or not JSON. */
function peekVersion(stdin: Buffer): string | undefined {
  try {
    const v = (JSON.parse(stdin.toString()) as { cniVersion?: unknown } | null)?.cniVersion;
    return typeof v === 'string' ? v : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The main() of a plugin binary: runs the handlers on this process's env
 * and stdin, prints on stdout (and stderr), exits 0 or 1. Exiting explicitly
 * matters: open netlink sockets or timers must not keep a CNI call alive.
 */
export function pluginMain(handlers: PluginHandlers, opts: PluginOptions): void {
  allowBlockingSockets(); // one call, nothing else on the event loop: clients of a daemon may block (unix/index.ts)
  const io: PluginIo = {
    env: process.env,
    stdin: () => (process.env.CNI_COMMAND === 'VERSION' && isTty(0) ? Buffer.alloc(0) : readFd(0)),
  };
  runPlugin(handlers, opts, io).then(
    (out) => {
      writeFd(1, out.stdout);
      writeFd(2, out.stderr);
      // after the answer is written: the runtime's wait ends at exit, the log line costs it one append
      recordCall(out.type, process.env.CNI_COMMAND, out.exitCode === 0);
      process.exit(out.exitCode);
    },
    (err: unknown) => {
      // runPlugin catches everything; this is the last resort if writing itself broke.
      writeFd(2, `${String(err)}\n`);
      process.exit(1);
    },
  );
}

/**
 * Handlers whose module loads on the first verb that needs it (`load`, e.g. `() => require('../plugin')`), so
 * VERSION, which a runtime asks often, costs no more than the runtime's own start. The module must define
 * all five verbs: a missing one would change what the dispatcher answers.
 */
export function lazyHandlers(load: () => Required<PluginHandlers>): PluginHandlers {
  return {
    add: (a) => load().add(a),
    del: (a) => load().del(a),
    check: (a) => load().check(a),
    gc: (a) => load().gc(a),
    status: (a) => load().status(a),
  };
}

/* Synchronous fd I/O: a plugin reads all of stdin before doing anything, and
 * must have written everything before it exits. Pipes handed over by a
 * runtime can be non-blocking, hence the EAGAIN loops. */

function sleepMs(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

/** A terminal (or /dev/null) on stdin: VERSION typed by hand reads nothing. fstat, not node:tty, which costs ~2 ms to load. */
function isTty(fd: number): boolean {
  try {
    return (require('node:fs') as typeof import('node:fs')).fstatSync(fd).isCharacterDevice();
  } catch {
    return false;
  }
}

function readFd(fd: number): Buffer {
  const chunks: Buffer[] = [];
  const buf = Buffer.allocUnsafe(64 * 1024);
  for (;;) {
    let n: number;
    try {
      n = readSync(fd, buf, 0, buf.length, null);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'EAGAIN') {
        sleepMs(2);
        continue;
      }
      // No stdin at all (closed fd) reads as empty; the config check then reports it.
      if (code === 'EOF' || code === 'EBADF') break;
      throw err;
    }
    if (n === 0) break;
    chunks.push(Buffer.from(buf.subarray(0, n)));
  }
  return Buffer.concat(chunks);
}

function writeFd(fd: number, text: string): void {
  if (text === '') return;
  let data = Buffer.from(text);
  while (data.length > 0) {
    try {
      const n = writeSync(fd, data);
      data = data.subarray(n);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'EAGAIN') {
        sleepMs(2);
        continue;
      }
      return;
    }
  }
}
