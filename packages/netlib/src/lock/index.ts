/**
 * An exclusive lock on a file, shared by every process on the node (several
 * plugin processes for one node run at once, plus daemons).
 *
 * Why real flock(2), and how without a native addon: Node has no flock, but
 * a flock lock belongs to the open file description, which a child process
 * shares when it inherits the descriptor. So we open the lock file, hand the
 * descriptor to `flock -x 3` (util-linux, or busybox) as its fd 3, and once
 * that child exits 0 the lock is ours and stays ours until we close the
 * descriptor. Compared with a lock file created with O_EXCL and an owner pid:
 *  - the kernel drops the lock when the holder dies, even by SIGKILL: no
 *    stale locks, no pid liveness checks, no pid-reuse or pid-namespace
 *    mistakes (a containerised daemon cannot see the host's pids);
 *  - waiters sleep in the kernel instead of polling.
 * The price is one short-lived helper process per acquisition (about 2 ms
 * measured here) and a dependency on the `flock` command, present on every
 * distribution (util-linux, busybox). Without it acquisition fails loudly:
 * silently falling back to another scheme would let two processes using
 * different schemes both "hold" the lock.
 *
 * Node opens files with O_CLOEXEC, so children spawned while the lock is
 * held (IPAM delegates) do not inherit it. The lock file is never deleted:
 * unlinking a flock'ed file lets a waiter lock an inode nobody else sees.
 * The lock is not re-entrant: taking it again in the same process waits like
 * any other process would.
 */
import { accessSync, closeSync, constants as fsConstants, ftruncateSync, mkdirSync, openSync, writeSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { LockTimeoutError } from '../errors';
import { trace } from '../log';

export interface FileLockOptions {
  /** How long to wait for the lock; 0 tries once. Default 30000. */
  timeoutMs?: number;
}

export interface FileLock {
  readonly path: string;
  /** Releases the lock (closes the descriptor); idempotent. */
  release(): void;
}

export const DEFAULT_LOCK_TIMEOUT_MS = 30_000;

/** Runs fn while holding an exclusive lock on `file` (created with its directory if needed). */
export async function withFileLock<T>(file: string, fn: () => T | Promise<T>, opts: FileLockOptions = {}): Promise<T> {
  const lock = await acquireFileLock(file, opts);
  try {
    return await fn();
  } finally {
    lock.release();
  }
}

/** Takes the lock; LockTimeoutError (code 11) when another holder keeps it past the timeout. */
export async function acquireFileLock(file: string, opts: FileLockOptions = {}): Promise<FileLock> {
  const timeoutMs = opts.timeoutMs ?? DEFAULT_LOCK_TIMEOUT_MS;
  if (!Number.isFinite(timeoutMs) || timeoutMs < 0) throw new RangeError(`lock: timeoutMs must be a non-negative number, got ${timeoutMs}`);
  const bin = flockBinary();
  mkdirSync(dirname(file), { recursive: true });
  const fd = openSync(file, fsConstants.O_RDWR | fsConstants.O_CREAT, 0o600);
  const started = Date.now();
  let acquired = false;
  try {
    acquired = await lockFd(bin, fd, timeoutMs);
  } finally {
    if (!acquired) closeSync(fd);
  }
  if (!acquired) throw new LockTimeoutError(file, timeoutMs);
  trace('lock', 'acquired', { path: file, waitedMs: Date.now() - started });
  // For whoever investigates a stuck node: the holder's pid. Not used for locking.
  try {
    ftruncateSync(fd, 0);
    writeSync(fd, `${process.pid}\n`, 0);
  } catch {
    // read-only or full file system: the lock itself still holds
  }
  let open = true;
  return {
    path: file,
    release(): void {
      if (!open) return;
      open = false;
      closeSync(fd);
      trace('lock', 'released', { path: file });
    },
  };
}

/** Has `flock -x 3` lock our descriptor; false when the timeout passes first. */
function lockFd(bin: string, fd: number, timeoutMs: number): Promise<boolean> {
  const { spawn } = require('node:child_process') as typeof import('node:child_process');
  return new Promise((resolve, reject) => {
    const args = timeoutMs === 0 ? ['-x', '-n', '3'] : ['-x', '3'];
    const child = spawn(bin, args, { stdio: ['ignore', 'ignore', 'pipe', fd], env: {} });
    let stderr = '';
    child.stderr!.on('data', (b: Buffer) => (stderr += b.toString()));
    // Killing the helper while it sleeps in flock(2) cancels the wait; if it
    // got the lock just before, closing our descriptor drops it again.
    // setTimeout cannot wait longer than 2^31-1 ms (it would fire at once).
    const timer = timeoutMs > 0 ? setTimeout(() => child.kill('SIGKILL'), Math.min(timeoutMs, 2 ** 31 - 1)) : undefined;
    child.on('error', (err) => {
      if (timer) clearTimeout(timer);
      reject(new Error(`lock: cannot run ${bin}: ${err.message}`, { cause: err }));
    });
    child.on('close', (code, signal) => {
      if (timer) clearTimeout(timer);
      if (code === 0) resolve(true);
      else if (signal === 'SIGKILL' || (timeoutMs === 0 && code === 1)) resolve(false);
      else reject(new Error(`lock: ${bin} ${args.join(' ')} failed: ${stderr.trim() || `exit status ${code}, signal ${signal}`}`));
    });
  });
}

let flockPath: string | undefined;

/** Locates flock(1) once: $PATH, then the usual system directories (runtimes may run plugins with a bare PATH). */
function flockBinary(): string {
  if (flockPath) return flockPath;
  const dirs = [...(process.env.PATH ?? '').split(':'), '/usr/bin', '/bin', '/usr/sbin', '/sbin'].filter((d) => d !== '');
  for (const dir of dirs) {
    const candidate = join(dir, 'flock');
    try {
      accessSync(candidate, fsConstants.X_OK);
      flockPath = candidate;
      return candidate;
    } catch {
      // next directory
    }
  }
  throw new Error(`lock: the flock command (util-linux or busybox) is not installed; searched ${dirs.join(':')}`);
}
