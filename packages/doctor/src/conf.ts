/**
 * `doctor conf`: lints a node's CNI conf dir the way the runtime will read it, before it breaks the node.
 *
 * What containerd (libcni) does with the dir: the files ending .conf, .conflist or .json, sorted by name; the
 * first one that loads is the pod network (containerd's default max_conf_num = 1), the rest are ignored. For
 * a 1.1.0 conflist containerd calls STATUS of every plugin every few seconds and reports the node's network
 * not ready while any fails; libcni refuses a plugin whose VERSION answer does not list the conflist's
 * cniVersion ("incompatible CNI versions"), for every verb, DEL included. Seen on a real node: Debian 12's
 * portmap (1.1.1, CNI <= 1.0.0) in a 1.1.0 conflist fails STATUS ("missing containerID") and the Node goes
 * NotReady, then its DEL fails before the plugins after it are reached.
 *
 * So each plugin of each file is looked up in the bin dirs and asked for VERSION, as libcni asks it; findings
 * are errors (the runtime will fail) or warnings (it works, but not as the author likely meant).
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { CniError, compareVersions, execDelegate, findPlugin, isSupportedVersion, NETWORK_NAME_RE } from '@cnikit/netlib';

export type Severity = 'error' | 'warning';

export interface Finding {
  severity: Severity;
  /** The plugin a finding is about (its type), when it is about one. */
  plugin?: string;
  msg: string;
}

export interface PluginReport {
  type: string;
  /** Where the runtime would find it; undefined when it is not in any bin dir. */
  binary?: string;
  /** Its VERSION answer's supportedVersions. */
  supportedVersions?: string[];
}

export interface FileReport {
  file: string;
  name?: string;
  cniVersion?: string;
  plugins: PluginReport[];
  /** The file the runtime uses as the pod network (the first that loads, by name). */
  used: boolean;
  findings: Finding[];
}

/** The files libcni considers, in the order it considers them. */
export function confFiles(confDir: string): string[] {
  let entries: fs.Dirent[];
  try {
    entries = fs.readdirSync(confDir, { withFileTypes: true });
  } catch (err) {
    // no conf dir is what the runtime sees as no network config: reported as such, not as a crash
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw err;
  }
  return entries
    .filter((e) => (e.isFile() || e.isSymbolicLink()) && ['.conf', '.conflist', '.json'].includes(path.extname(e.name)))
    .map((e) => e.name)
    .sort()
    .map((n) => path.join(confDir, n));
}

interface Parsed {
  name?: string;
  cniVersion?: string;
  plugins: { type?: unknown }[];
  findings: Finding[];
}

/**
 * A network config's text: a .conf holds one plugin (libcni wraps it in a list), a .conflist (or any config with
 * "plugins") a list. `mustList`: the .conflist extension promises a list.
 */
function parseConfig(text: string, mustList: boolean): Parsed {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (err) {
    return { plugins: [], findings: [{ severity: 'error', msg: `not JSON: ${(err as Error).message}` }] };
  }
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) {
    return { plugins: [], findings: [{ severity: 'error', msg: 'not a JSON object' }] };
  }
  const o = raw as Record<string, unknown>;
  const findings: Finding[] = [];
  const list = Array.isArray(o.plugins);
  if (!list && mustList) findings.push({ severity: 'error', msg: 'a .conflist without a "plugins" list' });
  const plugins = list ? (o.plugins as { type?: unknown }[]) : [o];
  if (plugins.length === 0) findings.push({ severity: 'error', msg: '"plugins" is empty' });
  const name = typeof o.name === 'string' ? o.name : undefined;
  if (!name || !NETWORK_NAME_RE.test(name))
    findings.push({ severity: 'error', msg: `network name ${JSON.stringify(o.name)} is missing or invalid` });
  const cniVersion = typeof o.cniVersion === 'string' ? o.cniVersion : undefined;
  if (!cniVersion) findings.push({ severity: 'error', msg: 'no cniVersion' });
  else if (!isSupportedVersion(cniVersion)) findings.push({ severity: 'error', msg: `cniVersion ${cniVersion} is not a CNI spec version` });
  else if (compareVersions(cniVersion, '1.0.0') < 0) {
    findings.push({
      severity: 'warning',
      msg: `cniVersion ${cniVersion}: a legacy version (no STATUS or GC; the runtime cannot tell when the network is not ready)`,
    });
  }
  return { name, cniVersion, plugins, findings };
}

interface VersionAnswer {
  supportedVersions?: unknown;
}

/** Looks a plugin up and asks it VERSION as libcni does; what it found and what is wrong. */
async function checkPlugin(
  type: unknown,
  cniVersion: string | undefined,
  binDirs: string[],
): Promise<{ report: PluginReport; findings: Finding[] }> {
  if (typeof type !== 'string' || type === '')
    return { report: { type: String(type) }, findings: [{ severity: 'error', msg: 'a plugin without "type"' }] };
  const report: PluginReport = { type };
  try {
    report.binary = findPlugin(type, binDirs);
  } catch (err) {
    return {
      report,
      findings: [{ severity: 'error', plugin: type, msg: `${(err as Error).message}: every ADD, DEL and STATUS of this network fails` }],
    };
  }
  let answer: VersionAnswer;
  try {
    const out = await execDelegate(
      type,
      'VERSION',
      Buffer.from(JSON.stringify({ cniVersion: cniVersion ?? '1.1.0' })),
      { path: binDirs },
      { timeoutMs: 10_000 },
    );
    answer = JSON.parse(out.toString()) as VersionAnswer;
  } catch (err) {
    const msg = err instanceof CniError ? `${err.message}${err.details ? `: ${err.details}` : ''}` : (err as Error).message;
    return { report, findings: [{ severity: 'error', plugin: type, msg: `VERSION failed (${msg})` }] };
  }
  if (!Array.isArray(answer.supportedVersions) || !answer.supportedVersions.every((v) => typeof v === 'string')) {
    return { report, findings: [{ severity: 'error', plugin: type, msg: 'its VERSION answer has no supportedVersions list' }] };
  }
  report.supportedVersions = answer.supportedVersions as string[];
  if (!cniVersion || report.supportedVersions.includes(cniVersion)) return { report, findings: [] };
  const consequence =
    compareVersions(cniVersion, '1.1.0') >= 0
      ? "the runtime's STATUS fails (the node's network goes not ready, no pod starts) and ADD and DEL fail with incompatible CNI versions"
      : 'ADD and DEL fail with incompatible CNI versions';
  return {
    report,
    findings: [
      {
        severity: 'error',
        plugin: type,
        msg: `speaks CNI ${report.supportedVersions.join(', ')}, not the network's ${cniVersion}: ${consequence}; lower the network's cniVersion or replace the plugin`,
      },
    ],
  };
}

/** One network config: its own findings and each plugin's, every plugin asked VERSION with its cniVersion. */
async function lintConfig(file: string, parsed: Parsed, binDirs: string[]): Promise<FileReport> {
  const report: FileReport = {
    file,
    name: parsed.name,
    cniVersion: parsed.cniVersion,
    plugins: [],
    used: false,
    findings: [...parsed.findings],
  };
  const version = parsed.cniVersion && isSupportedVersion(parsed.cniVersion) ? parsed.cniVersion : undefined;
  for (const p of parsed.plugins) {
    const { report: pr, findings } = await checkPlugin(p.type, version, binDirs);
    report.plugins.push(pr);
    report.findings.push(...findings);
  }
  return report;
}

/** A Multus NetworkAttachmentDefinition, as far as linting needs it. */
export interface Nad {
  namespace: string;
  name: string;
  /** spec.config: the network config Multus delegates to, as JSON text. */
  config?: string;
}

/**
 * Each NetworkAttachmentDefinition's config, as Multus runs it on this node: every plugin from the node's bin
 * dirs, called with the config's own cniVersion. (The real Multus forwards neither STATUS nor GC to these
 * delegates, so a mismatch shows only when a pod asking for the network is created or deleted.)
 */
export async function lintNads(nads: Nad[], binDirs: string[]): Promise<FileReport[]> {
  const reports: FileReport[] = [];
  for (const nad of nads) {
    const where = `NetworkAttachmentDefinition ${nad.namespace}/${nad.name}`;
    if (!nad.config) {
      reports.push({
        file: where,
        plugins: [],
        used: false,
        findings: [{ severity: 'warning', msg: 'no spec.config: Multus looks for a file of that name in its conf dir' }],
      });
      continue;
    }
    reports.push(await lintConfig(where, parseConfig(nad.config, false), binDirs));
  }
  return reports;
}

export interface LintOptions {
  confDir: string;
  binDirs: string[];
}

const readConfig = (file: string): Parsed => parseConfig(fs.readFileSync(file, 'utf8'), path.extname(file) === '.conflist');

// libcni skips a file that does not load (bad JSON, no name or version) and takes the next one
const loads = (parsed: Parsed): boolean => !parsed.findings.some((f) => f.severity === 'error') && parsed.plugins.length > 0;

/** The network the runtime uses (the first file that loads), read without asking any plugin. */
export function usedNetwork(
  confDir: string,
): { file: string; name?: string; cniVersion?: string; plugins: Record<string, unknown>[] } | undefined {
  for (const file of confFiles(confDir)) {
    const parsed = readConfig(file);
    if (loads(parsed))
      return { file, name: parsed.name, cniVersion: parsed.cniVersion, plugins: parsed.plugins as Record<string, unknown>[] };
  }
  return undefined;
}

/** Every file of the conf dir the runtime considers, in its order, with its findings. */
export async function lintConfDir(o: LintOptions): Promise<FileReport[]> {
  const reports: FileReport[] = [];
  let usedFound = false;
  const names = new Map<string, string>();
  for (const file of confFiles(o.confDir)) {
    const parsed = readConfig(file);
    const report = await lintConfig(file, parsed, o.binDirs);
    if (loads(parsed) && !usedFound) report.used = usedFound = true;
    else if (loads(parsed))
      report.findings.push({
        severity: 'warning',
        msg: `not used: the runtime takes the first network by file name (${path.basename(reports.find((r) => r.used)!.file)})`,
      });
    if (parsed.name && names.has(parsed.name))
      report.findings.push({ severity: 'warning', msg: `network name ${parsed.name} also in ${names.get(parsed.name)}` });
    if (parsed.name) names.set(parsed.name, path.basename(file));
    reports.push(report);
  }
  return reports;
}

/** A table for people: one line per config, then its findings. */
export function formatReports(reports: FileReport[], confDir: string): string {
  if (reports.length === 0) return `${confDir}: no network config (.conf, .conflist, .json): the runtime reports the network not ready\n`;
  const lines: string[] = [];
  for (const r of reports) {
    const plugins = r.plugins.map((p) => `${p.type} (${p.supportedVersions?.at(-1) ?? '?'})`).join(' -> ');
    const where = path.isAbsolute(r.file) ? path.basename(r.file) : r.file;
    lines.push(`${r.used ? '*' : ' '} ${where}  ${r.name ?? '?'}  cniVersion ${r.cniVersion ?? '?'}  ${plugins}`);
    for (const f of r.findings) lines.push(`    ${f.severity}: ${f.plugin ? `${f.plugin}: ` : ''}${f.msg}`);
  }
  if (reports.some((r) => r.used)) lines.push("(* the file the runtime uses; in parentheses each plugin's highest CNI version)");
  return `${lines.join('\n')}\n`;
}

/** No network the runtime would use, or an error in any file: the node is (or will be) broken. */
export function hasErrors(reports: FileReport[]): boolean {
  return reports.length === 0 || reports.some((r) => r.findings.some((f) => f.severity === 'error'));
}
