/**
 * Node installer (run by a DaemonSet): copies the gcp-ipam binary into the CNI bin dir and rewrites the `ipam`
 * section of the node's existing conflist (host-local -> gcp-ipam). Idempotent: an identical binary is not
 * copied again, an already rewritten conflist is not written again. The conflist as found before the first
 * rewrite is kept next to it as <file>.gcp-ipam.bak; uninstall() puts it back. Every write is a temp file + rename.
 */
import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';

export interface InstallOptions {
  /** The gcp-ipam executable to install. */
  binary: string;
  binDir: string;
  /** A conflist file, or the directory whose first *.conflist (by name, as runtimes pick) is rewritten. */
  conf: string;
  /** The new ipam section; `type` is forced to "gcp-ipam". */
  ipam: Record<string, unknown>;
  /** Only rewrite ipam sections of this type (default: any that is not gcp-ipam already). */
  replaceType?: string;
}

export interface InstallReport {
  binaryCopied: boolean;
  conflist: string;
  conflistChanged: boolean;
  backup: string;
  pluginsRewritten: string[];
}

const BACKUP_SUFFIX = '.gcp-ipam.bak';

function sha256(file: string): string {
  return crypto.createHash('sha256').update(fs.readFileSync(file)).digest('hex');
}

function writeAtomic(file: string, data: string | Buffer, mode: number): void {
  const tmp = path.join(path.dirname(file), `.${path.basename(file)}.${process.pid}.tmp`);
  fs.writeFileSync(tmp, data, { mode });
  fs.chmodSync(tmp, mode);
  fs.renameSync(tmp, file);
}

export function findConflist(conf: string): string {
  if (!fs.existsSync(conf)) throw new Error(`installer: ${conf} does not exist`);
  if (fs.statSync(conf).isFile()) return conf;
  const files = fs
    .readdirSync(conf)
    .filter((f) => f.endsWith('.conflist'))
    .sort();
  if (!files.length) throw new Error(`installer: no *.conflist in ${conf}`);
  return path.join(conf, files[0]!);
}

export function install(o: InstallOptions): InstallReport {
  // 1. the binary
  fs.mkdirSync(o.binDir, { recursive: true });
  const target = path.join(o.binDir, 'gcp-ipam');
  let binaryCopied = false;
  if (!fs.existsSync(target) || sha256(target) !== sha256(o.binary)) {
    writeAtomic(target, fs.readFileSync(o.binary), 0o755);
    binaryCopied = true;
  }
  // 2. the conflist
  const file = findConflist(o.conf);
  const text = fs.readFileSync(file, 'utf8');
  let list: { plugins?: { type?: string; ipam?: Record<string, unknown> }[] };
  try {
    list = JSON.parse(text);
  } catch (err) {
    throw new Error(`installer: ${file} is not JSON: ${(err as Error).message}`, { cause: err });
  }
  if (!Array.isArray(list.plugins)) throw new Error(`installer: ${file} has no "plugins" array`);
  const { type: _ignored, ...settings } = o.ipam;
  void _ignored;
  const ipam = { type: 'gcp-ipam', ...settings };
  const rewritten: string[] = [];
  for (const p of list.plugins) {
    if (!p.ipam || typeof p.ipam !== 'object') continue;
    const t = p.ipam.type;
    if (o.replaceType ? t !== o.replaceType && t !== 'gcp-ipam' : false) continue;
    if (JSON.stringify(p.ipam) === JSON.stringify(ipam)) continue;
    p.ipam = ipam;
    rewritten.push(String(p.type));
  }
  const backup = `${file}${BACKUP_SUFFIX}`;
  if (rewritten.length) {
    if (!fs.existsSync(backup)) writeAtomic(backup, text, 0o644);
    writeAtomic(file, `${JSON.stringify(list, null, 2)}\n`, 0o644);
  }
  return { binaryCopied, conflist: file, conflistChanged: rewritten.length > 0, backup, pluginsRewritten: rewritten };
}

/** Puts the backed-up conflist back and removes the binary. */
export function uninstall(o: Pick<InstallOptions, 'binDir' | 'conf'>): { restored: boolean } {
  const file = findConflist(o.conf);
  const backup = `${file}${BACKUP_SUFFIX}`;
  let restored = false;
  if (fs.existsSync(backup)) {
    writeAtomic(file, fs.readFileSync(backup), 0o644);
    fs.rmSync(backup);
    restored = true;
  }
  fs.rmSync(path.join(o.binDir, 'gcp-ipam'), { force: true });
  return { restored };
}
