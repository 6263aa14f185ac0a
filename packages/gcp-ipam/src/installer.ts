/**
 * Node installer (run by a DaemonSet): copies the gcp-ipam binary into the CNI bin dir and rewrites the `ipam`
 * section of the node's existing conflist (host-local -> gcp-ipam). Idempotent: an identical binary is not
 * copied again, an already rewritten conflist is not written again. The conflist as found before the first
 * rewrite is kept next to it as <file>.gcp-ipam.bak; uninstall() puts it back. Every write is a temp file + rename.
 *
 * The plugin runs on the host (the runtime execs it), not in the installer's pod: it cannot read the pod's
 * service account mount, and the node's files appear in the pod under a prefix (hostPath mounts at /host/...).
 * So the installer copies the account's token next to a kubeconfig it writes for the plugin, and every path it
 * writes into a file is the host's (`hostPrefix` stripped). watch() re-runs install so a rotated token (the
 * kubelet renews projected tokens) or a conflist put back by someone else is caught up with.
 */
import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

export const SERVICE_ACCOUNT_DIR = '/var/run/secrets/kubernetes.io/serviceaccount';

/** A kubeconfig for the plugin, made from the installer pod's service account. */
export interface PluginKubeconfig {
  /** Where to write it, as the installer sees it (e.g. /host/etc/cni/net.d/gcp-ipam/gcp-ipam.kubeconfig). */
  out: string;
  /** API server URL reachable from the host, @cnikit/kube/lite's inClusterServer(). */
  server: string;
  /** Holds `token` and `ca.crt` (default SERVICE_ACCOUNT_DIR). */
  serviceAccountDir?: string;
}

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
  /** Where the node's root is mounted in this container (e.g. /host); stripped from paths written into files. */
  hostPrefix?: string;
  kubeconfig?: PluginKubeconfig;
  /** Put into the ipam section when it has no `nodeName` (the plugin's default, the host name, is often not the node name). */
  nodeName?: string;
  /** Put into the ipam section when it has no `zone`. */
  zone?: string;
}

export interface InstallReport {
  binaryCopied: boolean;
  conflist: string;
  conflistChanged: boolean;
  backup: string;
  pluginsRewritten: string[];
  /** Only with `kubeconfig`: whether the kubeconfig or the token file was (re)written. */
  kubeconfigChanged?: boolean;
  tokenChanged?: boolean;
}

const BACKUP_SUFFIX = '.gcp-ipam.bak';

/** Hashes by path, size and mtime: --watch compares the ~110 MB executable every round, and must not reread it. */
const hashes = new Map<string, { size: number; mtimeMs: number; hash: string }>();
function sha256(file: string): string {
  const st = fs.statSync(file);
  const known = hashes.get(file);
  if (known && known.size === st.size && known.mtimeMs === st.mtimeMs) return known.hash;
  const hash = crypto.createHash('sha256').update(fs.readFileSync(file)).digest('hex');
  hashes.set(file, { size: st.size, mtimeMs: st.mtimeMs, hash });
  return hash;
}

function writeAtomic(file: string, data: string | Buffer, mode: number): void {
  const tmp = path.join(path.dirname(file), `.${path.basename(file)}.${process.pid}.tmp`);
  fs.writeFileSync(tmp, data, { mode });
  fs.chmodSync(tmp, mode);
  fs.renameSync(tmp, file);
}

/** Writes `file` unless it already holds `data`; true when written. */
function writeIfChanged(file: string, data: string, mode: number): boolean {
  if (fs.existsSync(file) && fs.readFileSync(file, 'utf8') === data) return false;
  writeAtomic(file, data, mode);
  return true;
}

/** `file` as the host sees it: `hostPrefix` removed. A file outside the prefix is not visible on the host. */
export function hostPath(file: string, hostPrefix = ''): string {
  const abs = path.resolve(file);
  if (!hostPrefix) return abs;
  const prefix = path.resolve(hostPrefix);
  if (prefix === '/') return abs;
  if (abs.startsWith(`${prefix}/`)) return abs.slice(prefix.length);
  throw new Error(`installer: ${abs} is not under the host prefix ${prefix}: the plugin on the host could not read it`);
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

/** The token file sits beside the kubeconfig, so one hostPath mount carries both. */
export function tokenFileFor(kubeconfigOut: string): string {
  return path.join(path.dirname(kubeconfigOut), 'gcp-ipam.token');
}

/**
 * Writes the kubeconfig (CA embedded, token by `tokenFile`, a host path) and copies the token (0600). The token is
 * referenced, not embedded, so a rotation rewrites one small file and the plugin reads it afresh on each call.
 */
export function writeKubeconfig(k: PluginKubeconfig, hostPrefix?: string): { kubeconfigChanged: boolean; tokenChanged: boolean } {
  const sa = k.serviceAccountDir ?? SERVICE_ACCOUNT_DIR;
  const token = fs.readFileSync(path.join(sa, 'token'), 'utf8').trim();
  if (!token) throw new Error(`installer: ${path.join(sa, 'token')} is empty`);
  const ca = fs.readFileSync(path.join(sa, 'ca.crt'));
  const tokenFile = tokenFileFor(k.out);
  fs.mkdirSync(path.dirname(k.out), { recursive: true, mode: 0o700 });
  // The token first: a kubeconfig never names a token file that is not there yet.
  const tokenChanged = writeIfChanged(tokenFile, token, 0o600);
  const kubeconfigChanged = writeIfChanged(k.out, kubeconfigText(k.server, ca, hostPath(tokenFile, hostPrefix)), 0o600);
  return { kubeconfigChanged, tokenChanged };
}

/** JSON is YAML: kubectl and kube-lite's kubeFromFile read it, and it needs no serializer. */
function kubeconfigText(server: string, ca: Buffer, tokenFile: string): string {
  const kc = {
    apiVersion: 'v1',
    kind: 'Config',
    clusters: [{ name: 'local', cluster: { server, 'certificate-authority-data': ca.toString('base64') } }],
    users: [{ name: 'gcp-ipam', user: { tokenFile } }],
    contexts: [{ name: 'gcp-ipam', context: { cluster: 'local', user: 'gcp-ipam' } }],
    'current-context': 'gcp-ipam',
  };
  return `${JSON.stringify(kc, null, 2)}\n`;
}

/** The ipam section to write: `type` forced, and what the node knows added where the --ipam JSON is silent. */
export function ipamSection(o: InstallOptions): Record<string, unknown> {
  const { type: _ignored, ...settings } = o.ipam;
  void _ignored;
  const ipam: Record<string, unknown> = { type: 'gcp-ipam', ...settings };
  if (o.kubeconfig && ipam.kubeconfig === undefined) ipam.kubeconfig = hostPath(o.kubeconfig.out, o.hostPrefix);
  if (o.nodeName && ipam.nodeName === undefined) ipam.nodeName = o.nodeName;
  if (o.zone && ipam.zone === undefined) ipam.zone = o.zone;
  return ipam;
}

function copyBinary(binary: string, binDir: string): boolean {
  fs.mkdirSync(binDir, { recursive: true });
  const target = path.join(binDir, 'gcp-ipam');
  if (fs.existsSync(target) && sha256(target) === sha256(binary)) return false;
  writeAtomic(target, fs.readFileSync(binary), 0o755);
  return true;
}

type Conflist = { plugins?: { type?: string; ipam?: Record<string, unknown> }[] };

function readConflist(file: string): { text: string; list: Conflist } {
  const text = fs.readFileSync(file, 'utf8');
  let list: Conflist;
  try {
    list = JSON.parse(text);
  } catch (err) {
    throw new Error(`installer: ${file} is not JSON: ${(err as Error).message}`, { cause: err });
  }
  if (!Array.isArray(list.plugins)) throw new Error(`installer: ${file} has no "plugins" array`);
  return { text, list };
}

/** Sets `ipam` on the plugins it applies to; returns the types of those changed. */
function rewriteIpam(list: Conflist, ipam: Record<string, unknown>, replaceType?: string): string[] {
  const rewritten: string[] = [];
  for (const p of list.plugins!) {
    if (!p.ipam || typeof p.ipam !== 'object') continue;
    const t = p.ipam.type;
    if (replaceType && t !== replaceType && t !== 'gcp-ipam') continue;
    if (JSON.stringify(p.ipam) === JSON.stringify(ipam)) continue;
    p.ipam = ipam;
    rewritten.push(String(p.type));
  }
  return rewritten;
}

export function install(o: InstallOptions): InstallReport {
  const binaryCopied = copyBinary(o.binary, o.binDir);
  // Before the conflist: once it names gcp-ipam, the runtime may call the plugin, which needs its kubeconfig.
  const kube = o.kubeconfig ? writeKubeconfig(o.kubeconfig, o.hostPrefix) : {};
  const file = findConflist(o.conf);
  const { text, list } = readConflist(file);
  const rewritten = rewriteIpam(list, ipamSection(o), o.replaceType);
  const backup = `${file}${BACKUP_SUFFIX}`;
  if (rewritten.length) {
    if (!fs.existsSync(backup)) writeAtomic(backup, text, 0o644);
    writeAtomic(file, `${JSON.stringify(list, null, 2)}\n`, 0o644);
  }
  return { binaryCopied, conflist: file, conflistChanged: rewritten.length > 0, backup, pluginsRewritten: rewritten, ...kube };
}

/** One log event per thing a run changed (none when it found everything in place). */
export function changes(r: InstallReport): Record<string, unknown>[] {
  const out: Record<string, unknown>[] = [];
  if (r.binaryCopied) out.push({ event: 'binary-copied' });
  if (r.tokenChanged) out.push({ event: 'token-written' });
  if (r.kubeconfigChanged) out.push({ event: 'kubeconfig-written' });
  if (r.conflistChanged) out.push({ event: 'conflist-rewritten', conflist: r.conflist, plugins: r.pluginsRewritten });
  return out;
}

export interface WatchOptions {
  intervalMs: number;
  signal: AbortSignal;
  log: (event: Record<string, unknown>) => void;
}

/**
 * Re-runs install() every `intervalMs` until `signal` aborts; resolves then. The caller runs the first install, so a
 * node that cannot be set up fails the pod at once; a later failure (a conflist being edited, a token mid-rotation)
 * is logged and retried on the next round, since restarting the pod would not fix it sooner.
 */
export async function watch(o: InstallOptions, w: WatchOptions): Promise<void> {
  while (await pause(w.intervalMs, w.signal)) {
    try {
      for (const c of changes(install(o))) w.log(c);
    } catch (err) {
      w.log({ event: 'error', error: (err as Error).message });
    }
  }
}

/** Waits `ms`; false when `signal` aborted (before or during the wait). */
async function pause(ms: number, signal: AbortSignal): Promise<boolean> {
  try {
    await sleep(ms, undefined, { signal });
    return true;
  } catch (err) {
    if (signal.aborted) return false;
    throw err;
  }
}

/** Puts the backed-up conflist back and removes the binary, and the kubeconfig and its token file when given. */
export function uninstall(o: Pick<InstallOptions, 'binDir' | 'conf'> & { kubeconfigOut?: string }): { restored: boolean } {
  const file = findConflist(o.conf);
  const backup = `${file}${BACKUP_SUFFIX}`;
  let restored = false;
  if (fs.existsSync(backup)) {
    writeAtomic(file, fs.readFileSync(backup), 0o644);
    fs.rmSync(backup);
    restored = true;
  }
  fs.rmSync(path.join(o.binDir, 'gcp-ipam'), { force: true });
  if (o.kubeconfigOut) {
    fs.rmSync(o.kubeconfigOut, { force: true });
    fs.rmSync(tokenFileFor(o.kubeconfigOut), { force: true });
  }
  return { restored };
}
