/**
 * Network namespace handles and switching the calling thread between them.
 *
 * A Netns is an open file descriptor on a namespace file (/var/run/netns/<name>,
 * /proc/<pid>/ns/net, a CNI_NETNS path). Holding the fd keeps the namespace
 * reachable even if its bind mount goes away. Switching uses setns(2) through the
 * netns addon; it affects only the calling thread, which for JavaScript is the
 * thread running the event loop. That is why runInNetns takes a synchronous
 * function: nothing asynchronous may ever run while the thread is elsewhere.
 */
import { closeSync, fstatSync, openSync } from 'node:fs';
import { join } from 'node:path';
import { NetnsNotFoundError } from '../errors';
import { netnsAddon } from '../native';

export interface Netns {
  /** The path the handle was opened from. */
  readonly path: string;
  /** The open descriptor (O_RDONLY, close-on-exec). Throws once the handle is closed. */
  readonly fd: number;
  /** Closes the descriptor (and the netlink socket cached for it, if no other handle uses it). */
  close(): void;
}

/** Where `ip netns add` bind-mounts named namespaces. */
export const NETNS_RUN_DIR = '/var/run/netns';

const closeHooks: Array<(ns: Netns) => void> = [];

/** Lets sockets.ts release the socket cached for a handle when it closes. */
export function onNetnsClose(hook: (ns: Netns) => void): void {
  closeHooks.push(hook);
}

class NetnsHandle implements Netns {
  private handleFd: number;

  constructor(
    readonly path: string,
    fd: number,
    private readonly permanent = false,
  ) {
    this.handleFd = fd;
  }

  get fd(): number {
    if (this.handleFd < 0) throw new Error(`netns handle ${this.path} is closed`);
    return this.handleFd;
  }

  close(): void {
    // The host handle is shared by every runInNetns call: it lives as long as the process.
    if (this.permanent || this.handleFd < 0) return;
    const fd = this.handleFd;
    for (const hook of closeHooks) hook(this);
    this.handleFd = -1;
    closeSync(fd);
  }

  toString(): string {
    return `netns ${this.path}`;
  }
}

/** Resolves a bare name ("blue") to /var/run/netns/blue; anything with a slash is a path. */
export function netnsPath(pathOrName: string): string {
  if (pathOrName.includes('/')) return pathOrName;
  if (pathOrName === '' || pathOrName === '.' || pathOrName === '..') throw new NetnsNotFoundError(pathOrName);
  return join(NETNS_RUN_DIR, pathOrName);
}

/** Opens a namespace by path or `ip netns` name; NetnsNotFoundError when it does not exist. */
export function openNetns(pathOrName: string): Netns {
  const p = netnsPath(pathOrName);
  let fd: number;
  try {
    fd = openSync(p, 'r');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ENOTDIR') throw new NetnsNotFoundError(p, { cause: err });
    throw err;
  }
  return new NetnsHandle(p, fd);
}

/**
 * The namespace, or undefined when no path was given or it is already gone: what DEL and GC want
 * (a runtime may call DEL after the netns is removed, or with CNI_NETNS empty).
 */
export function openNetnsIfPresent(pathOrName: string): Netns | undefined {
  if (pathOrName === '') return undefined;
  try {
    return openNetns(pathOrName);
  } catch (err) {
    if (err instanceof NetnsNotFoundError) return undefined;
    throw err;
  }
}

let host: Netns | undefined;
/** The namespace runInNetns is currently inside, if any (nesting restores the previous one). */
let current: Netns | undefined;

/** The namespace plugins treat as the host: the thread's original one (or a test's, see withHostNetns). */
export function hostNetns(): Netns {
  return hostOverride ?? originalNetns();
}

/** Set by tests (withHostNetns): the namespace plugins treat as "the host". */
let hostOverride: Netns | undefined;

/**
 * Makes hostNetns() answer `ns` while `fn` runs, so a plugin's handler can run
 * in-process against a test's "host" namespace instead of the machine's own.
 * The thread itself does not move; kernel calls already name their namespace.
 */
export async function withHostNetns<T>(ns: Netns, fn: () => Promise<T>): Promise<T> {
  const prev = hostOverride;
  hostOverride = ns;
  try {
    return await fn();
  } finally {
    hostOverride = prev;
  }
}

/**
 * The namespace this thread was in when netlib first needed it: where runInNetns
 * returns to. Opened lazily, but always before the first setns (runInNetns calls it
 * first), so it really is the original one. /proc/thread-self, not /proc/self: the
 * latter follows the main thread, which is wrong inside a worker.
 */
function originalNetns(): Netns {
  if (!host) {
    if (current) throw new Error('hostNetns: first call made while inside another netns');
    host = new NetnsHandle('/proc/thread-self/ns/net', openSync('/proc/thread-self/ns/net', 'r'), true);
  }
  return host;
}

function enter(ns: Netns, fd: number): void {
  const addon = netnsAddon(); // a load failure keeps its own error
  try {
    addon.setns(fd);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code ?? 'EUNKNOWN';
    throw Object.assign(new Error(`setns into ${ns.path}: ${code}`, { cause: err }), { code });
  }
}

function isThenable(x: unknown): x is PromiseLike<unknown> {
  return typeof x === 'object' && x !== null && typeof (x as { then?: unknown }).then === 'function';
}

/**
 * Runs `fn` with the calling thread inside `ns`, then returns to the namespace it was
 * in before, also when fn throws. Calls nest. `fn` must be synchronous: a promise it
 * returned would resume in the wrong namespace, so that is rejected with a TypeError.
 */
export function runInNetns<T>(ns: Netns, fn: () => T): T {
  const prev = current ?? originalNetns();
  const fd = ns.fd; // throws on a closed handle before we move
  enter(ns, fd);
  current = ns;
  try {
    const result = fn();
    if (isThenable(result)) {
      Promise.resolve(result).catch(() => undefined); // it ran in the wrong place; do not leak a rejection
      throw new TypeError('runInNetns: fn must be synchronous (it returned a promise)');
    }
    return result;
  } finally {
    leave(prev);
  }
}

/**
 * Returns the thread to `prev`. If that fails (its handle was closed inside fn), the
 * thread goes back to the host namespace and the failure is reported; if even that
 * fails, every later kernel call would hit the wrong namespace, so the process aborts
 * rather than corrupt state.
 */
function leave(prev: Netns): void {
  try {
    netnsAddon().setns(prev.fd);
    current = prev === host ? undefined : prev;
    return;
  } catch (err) {
    try {
      netnsAddon().setns(originalNetns().fd);
      current = undefined;
    } catch (fatal) {
      process.emitWarning(`netlib: cannot leave a namespace after runInNetns: ${String(fatal)}`);
      process.abort();
    }
    throw new Error(`runInNetns: could not return to ${prev.path}; returned to the host namespace`, { cause: err });
  }
}

/** Stable identity of the namespace behind a handle (nsfs device and inode), cached per handle. */
const keys = new WeakMap<Netns, string>();
export function netnsKey(ns: Netns): string {
  let key = keys.get(ns);
  if (key === undefined) {
    const st = fstatSync(ns.fd);
    key = `${st.dev}:${st.ino}`;
    keys.set(ns, key);
  }
  return key;
}

/** True when two handles refer to the same namespace. */
export const sameNetns = (a: Netns, b: Netns): boolean => netnsKey(a) === netnsKey(b);
