#!/usr/bin/env node
// Installs the built executables (dist/bin) where a CNI runtime looks for plugins,
// and optionally the example conflists (testdata/conflists) where it looks for networks.
//
//   npm run install-plugins -- --prefix /opt/cni/bin [--mode separate|multicall]
//                              [--runtime PATH] [--conf-dir /etc/cni/net.d] [--from dist/bin]
//
// separate:  one self-contained executable per plugin (~110 MB each).
// multicall: one runtime (`cnikit`, holding every plugin) plus one hard link per
//            plugin name, so the disk holds one executable whatever the number of
//            plugins. Where a hard link is impossible (runtime on another
//            filesystem), the name gets a copy instead.
// Idempotent: a file already holding the right bytes (or already linked to the
// runtime) is left alone. Every replacement is a rename of a complete temp file,
// so a runtime calling a plugin mid-install never runs a half-written one.
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { parseArgs } from 'node:util';
import { workspaceTargets } from './build/lib/targets.mjs';

const root = path.resolve(import.meta.dirname, '..');
const { values: opt } = parseArgs({
  options: {
    prefix: { type: 'string' },
    mode: { type: 'string', default: 'separate' },
    runtime: { type: 'string' },
    'conf-dir': { type: 'string' },
    from: { type: 'string', default: path.join(root, 'dist', 'bin') },
    conflists: { type: 'string', default: path.join(root, 'testdata', 'conflists') },
  },
});
const MULTICALL = 'cnikit';

function fail(msg) {
  process.stderr.write(`install-plugins: ${msg}\n`);
  process.exit(2);
}

const report = (what, file, extra = '') => console.log(`${what.padEnd(9)} ${file}${extra ? `  (${extra})` : ''}`);

/** True if both files hold the same bytes (compared in chunks: executables are ~110 MB). */
function sameContent(a, b) {
  let fa, fb;
  try {
    if (fs.statSync(a).size !== fs.statSync(b).size) return false;
    fa = fs.openSync(a, 'r');
    fb = fs.openSync(b, 'r');
    const ba = Buffer.allocUnsafe(1 << 20);
    const bb = Buffer.allocUnsafe(1 << 20);
    for (;;) {
      const na = fs.readSync(fa, ba, 0, ba.length, null);
      const nb = fs.readSync(fb, bb, 0, bb.length, null);
      if (na !== nb || !ba.subarray(0, na).equals(bb.subarray(0, nb))) return false;
      if (na === 0) return true;
    }
  } catch (e) {
    if (e.code === 'ENOENT') return false;
    throw e;
  } finally {
    if (fa !== undefined) fs.closeSync(fa);
    if (fb !== undefined) fs.closeSync(fb);
  }
}

const tempBeside = (dest) => path.join(path.dirname(dest), `.${path.basename(dest)}.${process.pid}.tmp`);

/** Puts a copy of src at dest (atomic replace), unless dest already has its bytes. Returns what it did. */
function copyFile(src, dest, mode) {
  if (sameContent(src, dest)) {
    if ((fs.statSync(dest).mode & 0o777) !== mode) fs.chmodSync(dest, mode);
    return 'unchanged';
  }
  const tmp = tempBeside(dest);
  try {
    fs.copyFileSync(src, tmp);
    fs.chmodSync(tmp, mode);
    fs.renameSync(tmp, dest); // a plugin being executed keeps its old inode: no ETXTBSY
  } finally {
    fs.rmSync(tmp, { force: true });
  }
  return 'installed';
}

/** Makes dest a hard link to runtime (atomic replace); a copy where links cannot be made. */
function linkFile(runtime, dest) {
  const rs = fs.statSync(runtime);
  const ds = fs.statSync(dest, { throwIfNoEntry: false });
  if (ds && ds.ino === rs.ino && ds.dev === rs.dev) return report('unchanged', dest, `link to ${runtime}`);
  const tmp = tempBeside(dest);
  fs.rmSync(tmp, { force: true });
  try {
    fs.linkSync(runtime, tmp);
  } catch (e) {
    // EXDEV: another filesystem; EPERM/ENOTSUP: one without hard links (some FUSE, vfat).
    if (!['EXDEV', 'EPERM', 'ENOTSUP', 'EMLINK'].includes(e.code)) throw e;
    return report(copyFile(runtime, dest, 0o755), dest, `a copy: ${e.code}, no hard link possible`);
  }
  try {
    fs.renameSync(tmp, dest);
  } finally {
    fs.rmSync(tmp, { force: true });
  }
  report('linked', dest, `-> ${runtime}`);
}

/** Regular executable files in dir, by name. */
function executables(dir) {
  if (!fs.existsSync(dir)) fail(`${dir} does not exist: run npm run build first`);
  return fs
    .readdirSync(dir)
    .sort()
    .filter((n) => {
      if (n.startsWith('.')) return false; // a build's temp file
      const st = fs.statSync(path.join(dir, n));
      return st.isFile() && (st.mode & 0o111) !== 0;
    });
}

/** Executables the workspace declares as daemons or tools (not in "cnikit.cniPlugins"): they run as containers, not from /opt/cni/bin. */
function notCniPlugins() {
  return new Set(
    workspaceTargets(path.resolve(import.meta.dirname, '..'))
      .filter((t) => !t.cni)
      .map((t) => t.name),
  );
}

function installSeparate(from, prefix) {
  const skip = notCniPlugins();
  const names = executables(from).filter((n) => n !== MULTICALL && !skip.has(n));
  if (names.length === 0) fail(`no plugin executables in ${from}`);
  for (const n of names) report(copyFile(path.join(from, n), path.join(prefix, n), 0o755), path.join(prefix, n));
  const stale = path.join(prefix, MULTICALL);
  if (fs.existsSync(stale)) console.log(`note      ${stale} is left from a multicall install; remove it if nothing links to it`);
  return names.map((n) => path.join(prefix, n));
}

function installMulticall(from, prefix, runtimeDest) {
  const src = path.join(from, MULTICALL);
  if (!fs.existsSync(src)) fail(`${src} missing: run npm run build (it builds the multi-call executable)`);
  // The executable knows which programs it holds; ask it rather than trusting dist/bin's listing.
  const names = execFileSync(src, ['--list'], { encoding: 'utf8', env: {} }).split('\n').filter(Boolean);
  fs.mkdirSync(path.dirname(runtimeDest), { recursive: true });
  report(copyFile(src, runtimeDest, 0o755), runtimeDest, `runtime holding ${names.join(' ')}`);
  for (const n of names) linkFile(runtimeDest, path.join(prefix, n));
  return [runtimeDest, ...names.map((n) => path.join(prefix, n))];
}

function installConflists(srcDir, confDir) {
  fs.mkdirSync(confDir, { recursive: true });
  for (const n of fs
    .readdirSync(srcDir)
    .filter((f) => /\.(conflist|conf|json)$/.test(f))
    .sort()) {
    report(copyFile(path.join(srcDir, n), path.join(confDir, n), 0o644), path.join(confDir, n));
  }
}

/** Bytes on disk for a set of paths, each inode counted once (hard links share one). */
function diskBytes(files) {
  const seen = new Map();
  for (const f of files) {
    const st = fs.statSync(f);
    seen.set(`${st.dev}:${st.ino}`, st.blocks * 512);
  }
  return [...seen.values()].reduce((a, b) => a + b, 0);
}

function main() {
  if (!opt.prefix) fail('--prefix DIR is required (e.g. /opt/cni/bin)');
  if (!['separate', 'multicall'].includes(opt.mode)) fail(`--mode: separate or multicall, not ${opt.mode}`);
  const prefix = path.resolve(opt.prefix);
  fs.mkdirSync(prefix, { recursive: true });
  const files =
    opt.mode === 'separate'
      ? installSeparate(path.resolve(opt.from), prefix)
      : installMulticall(path.resolve(opt.from), prefix, path.resolve(opt.runtime ?? path.join(prefix, MULTICALL)));
  if (opt['conf-dir']) installConflists(path.resolve(opt.conflists), path.resolve(opt['conf-dir']));
  console.log(`${opt.mode}: ${files.length} files, ${(diskBytes(files) / 1e6).toFixed(1)} MB on disk`);
}

main();
