/**
 * The install step every CNI DaemonSet has, shared by all cnikit images: put the plugins into the node's CNI bin
 * dir and the network's conflist into its conf dir without a moment where the runtime could run half a binary or
 * read half a file.
 *
 * - The image's executable (one multi-call program per image) is copied under a temporary name and renamed, so a
 *   plugin running during an upgrade keeps its old inode and a new one never sees a partial file.
 * - Each CNI plugin name becomes a symbolic link to it (the multi-call executable picks the program by the name
 *   it was started as), replaced by rename as well.
 * - The conflist is written last: containerd watches the conf dir and uses a network as soon as its file appears,
 *   so the binaries it names must already be in place.
 */
import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';

export interface InstallOptions {
  /** The executable to install (the running one in an image). */
  executable: string;
  binDir: string;
  /** CNI plugin names to link to the executable. */
  programs: string[];
  /** A conflist file to install (validated), and where. */
  conflist?: { file: string; confDir: string; name?: string };
  log?: (msg: string) => void;
}

export interface InstallResult {
  binary: string;
  /** False when an identical file was already there (nothing copied). */
  copied: boolean;
  links: string[];
  conflist?: string;
}

const PROGRAM = /^[a-z0-9][a-z0-9._-]*$/;

export function install(opts: InstallOptions): InstallResult {
  for (const p of opts.programs) if (!PROGRAM.test(p)) throw new Error(`program name ${JSON.stringify(p)} is not a file name`);
  const conflist = opts.conflist && readConflist(opts.conflist.file);
  fs.mkdirSync(opts.binDir, { recursive: true });
  const name = path.basename(opts.executable);
  const binary = path.join(opts.binDir, name);
  const copied = !sameContent(opts.executable, binary);
  if (copied) replaceFile(binary, (tmp) => fs.copyFileSync(opts.executable, tmp), 0o755);
  const links = opts.programs.map((p) => {
    const link = path.join(opts.binDir, p);
    replaceLink(link, name);
    return link;
  });
  const result: InstallResult = { binary, copied, links };
  if (opts.conflist && conflist) {
    fs.mkdirSync(opts.conflist.confDir, { recursive: true });
    const file = path.join(opts.conflist.confDir, opts.conflist.name ?? path.basename(opts.conflist.file));
    replaceFile(file, (tmp) => fs.writeFileSync(tmp, conflist), 0o644);
    result.conflist = file;
  }
  opts.log?.(`installed ${binary}${copied ? '' : ' (unchanged)'}, ${links.length} link(s)${result.conflist ? `, ${result.conflist}` : ''}`);
  return result;
}

/** The conflist's text once it parses as one: a runtime given a broken file would mark the node not ready. */
function readConflist(file: string): string {
  const text = fs.readFileSync(file, 'utf8');
  let conf: { cniVersion?: unknown; name?: unknown; plugins?: unknown };
  try {
    conf = JSON.parse(text);
  } catch (err) {
    throw new Error(`${file}: not JSON: ${(err as Error).message}`, { cause: err });
  }
  if (typeof conf.cniVersion !== 'string' || typeof conf.name !== 'string' || !Array.isArray(conf.plugins) || conf.plugins.length === 0) {
    throw new Error(`${file}: a conflist needs cniVersion, name and a non-empty plugins list`);
  }
  return text;
}

/** Writes through a temporary file in the same dir (fsynced), then renames it over `file`. */
function replaceFile(file: string, write: (tmp: string) => void, mode: number): void {
  const tmp = path.join(path.dirname(file), `.${path.basename(file)}.${process.pid}.tmp`);
  try {
    write(tmp);
    fs.chmodSync(tmp, mode);
    const fd = fs.openSync(tmp, 'r');
    fs.fsyncSync(fd);
    fs.closeSync(fd);
    fs.renameSync(tmp, file);
  } finally {
    fs.rmSync(tmp, { force: true });
  }
}

function replaceLink(link: string, target: string): void {
  try {
    if (fs.readlinkSync(link) === target) return;
  } catch {
    // absent, or a regular file (an older install): replaced below
  }
  const tmp = path.join(path.dirname(link), `.${path.basename(link)}.${process.pid}.tmp`);
  fs.rmSync(tmp, { force: true });
  fs.symlinkSync(target, tmp);
  fs.renameSync(tmp, link);
}

function sameContent(a: string, b: string): boolean {
  try {
    if (fs.statSync(a).size !== fs.statSync(b).size) return false;
  } catch {
    return false;
  }
  const digest = (f: string): string => crypto.createHash('sha256').update(fs.readFileSync(f)).digest('hex');
  return digest(a) === digest(b);
}
