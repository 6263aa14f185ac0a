/**
 * Loads native addons: our netns addon (setns) and the `netlink` package's binding.
 *
 * Dev mode (jest, plain node on the sources): from their build folders.
 *
 * SEA mode (inside a single-file executable built by tools/build/sea.mjs): the addon
 * bytes travel as the SEA asset `addon/<name>.node`. dlopen needs a file, so the bytes
 * are written once to a content-addressed file `<sha256>.node` in the first usable cache
 * directory and loaded from there by every later run.
 *
 * Nothing native is touched at import time: the executables are V8 startup snapshots,
 * which cannot hold native handles, and a VERSION call must not pay for a dlopen.
 */
import {
  closeSync,
  constants as fsConstants,
  fstatSync,
  lstatSync,
  mkdirSync,
  openSync,
  readSync,
  renameSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve, sep as pathSep } from 'node:path';
import type * as Sea from 'node:sea';

export type AddonName = 'netns' | 'netlink';

export interface NetnsAddon {
  /** setns(fd, CLONE_NEWNET) on the calling thread; throws an Error with .code = errno name. */
  setns(fd: number): void;
  /** gettid() of the calling thread. */
  gettid(): number;
  /** A connected, blocking AF_UNIX stream socket's fd (unix/index.ts); connect waits at most timeoutMs. */
  unixConnect(path: string, timeoutMs: number): number;
  /** Writes all of `data` within timeoutMs (ETIMEDOUT otherwise). */
  sockWrite(fd: number, data: Buffer, timeoutMs: number): void;
  /** What one read returned within timeoutMs (ETIMEDOUT otherwise), at most 64 KiB; empty at end of stream. */
  sockRead(fd: number, timeoutMs: number): Buffer;
  /** A bound AF_NETLINK socket's fd in the thread's current netns (nl/channel.ts). */
  netlinkOpen(protocol: number): number;
  /** One whole datagram within timeoutMs (ETIMEDOUT otherwise); EMSGSIZE if it exceeds 64 KiB. */
  netlinkRecv(fd: number, timeoutMs: number): Buffer;
}

const loaded = new Map<AddonName, unknown>();

export function loadAddon(name: AddonName): unknown {
  let mod = loaded.get(name);
  if (mod === undefined) {
    const sea = seaApi();
    mod = sea ? loadFromSea(sea, name) : dlopen(devPath(name));
    loaded.set(name, mod);
  }
  return mod;
}

export function netnsAddon(): NetnsAddon {
  return loadAddon('netns') as NetnsAddon;
}

function devPath(name: AddonName): string {
  if (name === 'netns') return join(__dirname, '..', '..', 'native', 'build', 'Release', 'netns.node');
  return join(dirname(require.resolve('netlink/package.json')), 'prebuilds', 'linux-x64', 'node.napi.node');
}

function dlopen(file: string): unknown {
  const m = { exports: {} as unknown };
  process.dlopen(m, file);
  return m.exports;
}

/** The SEA API when running inside a single executable; asked lazily so a snapshot never caches the answer. */
function seaApi(): typeof Sea | undefined {
  let sea: typeof Sea;
  try {
    sea = require('node:sea');
  } catch {
    return undefined; // runtime older than node:sea: never a SEA
  }
  return sea.isSea() ? sea : undefined;
}

/** Asset key of an addon; the build also stores `<key>.sha256` (hex) so no hashing happens at run time. */
export const assetKey = (name: AddonName): string => `addon/${name}.node`;

function loadFromSea(sea: typeof Sea, name: AddonName): unknown {
  let bytes: Buffer;
  try {
    bytes = Buffer.from(sea.getRawAsset(assetKey(name))); // a view on the executable's memory, no copy
  } catch (e) {
    throw new Error(`native: addon ${name}: this executable holds no asset ${assetKey(name)}`, { cause: e });
  }
  const digest = embeddedDigest(sea, name) ?? sha256(bytes);
  const failures: string[] = [];
  for (const dir of cacheDirCandidates()) {
    try {
      return dlopen(materialize(dir, digest, bytes));
    } catch (e) {
      failures.push(`${dir}: ${(e as Error).message}`); // read-only, noexec, foreign owner...: try the next one
    }
  }
  throw new Error(`native: addon ${name}: no usable cache directory (${failures.join('; ')})`);
}

function embeddedDigest(sea: typeof Sea, name: AddonName): string | undefined {
  try {
    const hex = Buffer.from(sea.getRawAsset(`${assetKey(name)}.sha256`))
      .toString('latin1')
      .trim();
    return /^[0-9a-f]{64}$/.test(hex) ? hex : undefined;
  } catch {
    return undefined;
  }
}

function sha256(bytes: Buffer): string {
  // Loaded only on this fallback path: crypto costs start-up time the normal path avoids.
  const crypto: typeof import('node:crypto') = require('node:crypto');
  return crypto.createHash('sha256').update(bytes).digest('hex');
}

/**
 * Where addon files may live, best first. $CNIKIT_CACHE_DIR lets an operator choose;
 * /var/cache survives reboots; /run is tmpfs but usually writable by root even on
 * read-only images; the per-user temp dir is for unprivileged runs (tests, rootless).
 */
export function cacheDirCandidates(env: NodeJS.ProcessEnv = process.env): string[] {
  const dirs: string[] = [];
  if (env.CNIKIT_CACHE_DIR) dirs.push(resolve(env.CNIKIT_CACHE_DIR));
  dirs.push('/var/cache/cnikit', '/run/cnikit', join(tmpdir(), `cnikit-${process.geteuid?.() ?? 'user'}`));
  return dirs;
}

/**
 * Returns the path of `<dir>/<digest>.node` holding exactly `bytes`, writing it if it is
 * absent or differs (a partial write from a crash, a truncated or corrupted file).
 * Safe under many concurrent first runs: each writer uses its own temp file in the same
 * directory and rename(2) replaces the target atomically, so readers see either no file,
 * the old file or a complete one.
 */
export function materialize(dir: string, digest: string, bytes: Buffer): string {
  ensureTrustedDir(dir);
  const file = join(dir, `${digest}.node`);
  if (holds(file, bytes)) return file;
  const tmp = join(dir, `.${digest}.${process.pid}.${Date.now()}.${Math.random().toString(36).slice(2)}.tmp`);
  try {
    writeFileSync(tmp, bytes, { flag: 'wx', mode: 0o644 });
    renameSync(tmp, file);
  } catch (e) {
    rmSync(tmp, { force: true });
    throw e;
  }
  return file;
}

/**
 * Creates the directory if needed and refuses one that others could write into: a file we
 * verified could otherwise be swapped before dlopen maps it.
 */
function ensureTrustedDir(dir: string): void {
  const shared = dir.startsWith(tmpdir() + pathSep);
  mkdirSync(dir, { recursive: true, mode: shared ? 0o700 : 0o755 });
  const st = lstatSync(dir);
  if (!st.isDirectory()) throw new Error('not a directory');
  const uid = process.geteuid?.();
  if (uid !== undefined && st.uid !== uid && st.uid !== 0) throw new Error(`owned by uid ${st.uid}`);
  if ((st.mode & 0o022) !== 0) throw new Error(`writable by group or others (mode ${(st.mode & 0o777).toString(8)})`);
}

/** True if `file` is a regular file whose bytes equal `bytes` (stronger than re-hashing it, and cheaper). */
function holds(file: string, bytes: Buffer): boolean {
  let fd: number;
  try {
    fd = openSync(file, fsConstants.O_RDONLY | fsConstants.O_NOFOLLOW);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ELOOP') return false; // absent, or a symlink: rename replaces it
    throw e;
  }
  try {
    const st = fstatSync(fd);
    if (!st.isFile() || st.size !== bytes.length) return false;
    const got = Buffer.allocUnsafe(st.size);
    let off = 0;
    while (off < got.length) {
      const n = readSync(fd, got, off, got.length - off, off);
      if (n === 0) return false;
      off += n;
    }
    return got.equals(bytes);
  } finally {
    closeSync(fd);
  }
}
