// A real, local Kubernetes control plane for tests and demos: etcd + kube-apiserver (+ kube-controller-manager
// running only the garbage collector), started the way envtest starts them: loopback only, self-signed CA,
// serving and admin client certificates, a service-account key pair, authorization AlwaysAllow.
//
// This file is run directly by Node 24 (type stripping) from tools/cluster/cluster.mjs as well as through jest,
// so it uses only erasable TypeScript syntax and imports nothing but Node built-ins.
import { spawn, execFileSync } from 'node:child_process';
import { generateKeyPairSync } from 'node:crypto';
import * as fs from 'node:fs';
import * as http from 'node:http';
import * as https from 'node:https';
import * as net from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';

export const DEFAULT_K8S_VERSION = 'v1.37.2';

export interface ClusterOptions {
  /** Where state lives (certs, etcd data, logs, kubeconfig, state.json). Created; must not hold a running cluster. */
  stateDir?: string;
  /** Folder holding kube-apiserver, etcd, kube-controller-manager. Default: the build cache for `version`. */
  binDir?: string;
  /** Kubernetes version of the cached binaries (default $CNIKIT_K8S_VERSION or DEFAULT_K8S_VERSION). */
  version?: string;
  /** Path of tools/cluster/build.sh, run when the binaries are missing. Default: found upwards from the cwd. */
  buildScript?: string;
  /** Run kube-controller-manager with only the garbage collector (ownerReference cascades). Default true. */
  garbageCollector?: boolean;
  /** Extra kube-apiserver flags, e.g. ['--watch-cache-sizes=configmaps#0']. */
  apiServerArgs?: string[];
  /**
   * Pods get service account tokens (ServiceAccount admission on): for real nodes whose pods use in-cluster
   * config (tools/node-lab runs the controllers that create the accounts and publish the CA). Default false.
   */
  serviceAccounts?: boolean;
  /** How long to wait for /readyz (ms). Default 60 s. */
  readyTimeoutMs?: number;
  /** Progress messages. */
  log?: (msg: string) => void;
}

export interface ClusterInfo {
  version: string;
  stateDir: string;
  kubeconfig: string;
  /** https://127.0.0.1:<port> */
  server: string;
  /** http://127.0.0.1:<port>: etcd's client URL (its JSON gateway answers /v3/... too). */
  etcd: string;
  caFile: string;
  pids: { etcd: number; apiserver: number; controllerManager?: number };
  controllerManagerPort?: number;
  /** Milliseconds from the start call until the API server was ready. */
  startupMs: number;
  startedAt: string;
}

export function defaultStateDir(): string {
  if (process.env.CNIKIT_CLUSTER_DIR) return process.env.CNIKIT_CLUSTER_DIR;
  const runtime = process.env.XDG_RUNTIME_DIR;
  return path.join(runtime && fs.existsSync(runtime) ? runtime : os.tmpdir(), 'cnikit-cluster');
}

export function defaultBinDir(version: string): string {
  if (process.env.CNIKIT_K8S_BIN_DIR) return process.env.CNIKIT_K8S_BIN_DIR;
  const cacheRoot =
    process.env.CNIKIT_K8S_CACHE ?? path.join(process.env.XDG_CACHE_HOME ?? path.join(os.homedir(), '.cache'), 'cnikit', 'k8s');
  return path.join(cacheRoot, version);
}

function findUp(start: string, rel: string): string | undefined {
  let dir = path.resolve(start);
  for (;;) {
    const candidate = path.join(dir, rel);
    if (fs.existsSync(candidate)) return candidate;
    const parent = path.dirname(dir);
    if (parent === dir) return undefined;
    dir = parent;
  }
}

const BINARIES = ['kube-apiserver', 'etcd', 'kube-controller-manager'];

/** Returns the folder with the binaries, running build.sh (idempotent, cached) when they are missing. */
export function ensureBinaries(opts: ClusterOptions = {}): string {
  const version = opts.version ?? process.env.CNIKIT_K8S_VERSION ?? DEFAULT_K8S_VERSION;
  const binDir = opts.binDir ?? defaultBinDir(version);
  if (BINARIES.every((b) => fs.existsSync(path.join(binDir, b)))) return binDir;
  if (opts.binDir || process.env.CNIKIT_K8S_BIN_DIR) {
    throw new Error(`cluster: binaries missing in ${binDir} (need ${BINARIES.join(', ')})`);
  }
  const script = opts.buildScript ?? findUp(process.cwd(), 'tools/cluster/build.sh');
  if (!script) throw new Error(`cluster: binaries missing in ${binDir} and tools/cluster/build.sh not found`);
  opts.log?.(`cluster: building Kubernetes ${version} binaries with ${script} (slow the first time)`);
  execFileSync('bash', [script], { stdio: ['ignore', 'ignore', 'inherit'], env: { ...process.env, CNIKIT_K8S_VERSION: version } });
  return binDir;
}

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address();
      srv.close(() => (typeof addr === 'object' && addr ? resolve(addr.port) : reject(new Error('cluster: no port'))));
    });
  });
}

function openssl(args: string[], cwd: string): void {
  try {
    execFileSync('openssl', args, { cwd, stdio: ['ignore', 'ignore', 'pipe'] });
  } catch (err) {
    const e = err as { stderr?: Buffer; message: string };
    throw new Error(`cluster: openssl ${args[0]} failed: ${e.stderr?.toString().trim() || e.message}`, { cause: err });
  }
}

/** A CA, a serving certificate for 127.0.0.1/localhost, an admin client certificate (system:masters). */
function makeCerts(dir: string): void {
  fs.mkdirSync(dir, { recursive: true });
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  openssl(
    [
      'req',
      '-x509',
      ...ec,
      '-keyout',
      'ca.key',
      '-out',
      'ca.crt',
      '-days',
      '3650',
      '-subj',
      '/CN=cnikit-cluster-ca',
      '-addext',
      'basicConstraints=critical,CA:TRUE',
      '-addext',
      'keyUsage=critical,keyCertSign,cRLSign',
    ],
    dir,
  );
  const leaf = (name: string, subj: string, ext: string): void => {
    openssl(['req', '-new', ...ec, '-keyout', `${name}.key`, '-out', `${name}.csr`, '-subj', subj], dir);
    fs.writeFileSync(path.join(dir, `${name}.ext`), ext);
    openssl(
      [
        'x509',
        '-req',
        '-in',
        `${name}.csr`,
        '-CA',
        'ca.crt',
        '-CAkey',
        'ca.key',
        '-CAcreateserial',
        '-days',
        '3650',
        '-out',
        `${name}.crt`,
        '-extfile',
        `${name}.ext`,
      ],
      dir,
    );
  };
  leaf(
    'apiserver',
    '/CN=kube-apiserver',
    // 10.0.0.1: the kubernetes Service's ClusterIP, where pods of real nodes (tools/node-lab) reach it
    'subjectAltName=IP:127.0.0.1,IP:10.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc\n' +
      'keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n',
  );
  leaf('admin', '/O=system:masters/CN=cnikit-admin', 'keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n');
  const sa = generateKeyPairSync('ec', { namedCurve: 'prime256v1' });
  fs.writeFileSync(path.join(dir, 'sa.key'), sa.privateKey.export({ type: 'pkcs8', format: 'pem' }), { mode: 0o600 });
  fs.writeFileSync(path.join(dir, 'sa.pub'), sa.publicKey.export({ type: 'spki', format: 'pem' }));
}

function kubeconfigYaml(server: string, certDir: string): string {
  const b64 = (f: string): string => fs.readFileSync(path.join(certDir, f)).toString('base64');
  return [
    'apiVersion: v1',
    'kind: Config',
    'clusters:',
    '- name: cnikit',
    '  cluster:',
    `    server: ${server}`,
    `    certificate-authority-data: ${b64('ca.crt')}`,
    'users:',
    '- name: cnikit-admin',
    '  user:',
    `    client-certificate-data: ${b64('admin.crt')}`,
    `    client-key-data: ${b64('admin.key')}`,
    'contexts:',
    '- name: cnikit',
    '  context:',
    '    cluster: cnikit',
    '    user: cnikit-admin',
    '    namespace: default',
    'current-context: cnikit',
    '',
  ].join('\n');
}

function startProcess(stateDir: string, name: string, bin: string, args: string[]): number {
  const logDir = path.join(stateDir, 'logs');
  fs.mkdirSync(logDir, { recursive: true });
  const fd = fs.openSync(path.join(logDir, `${name}.log`), 'a');
  // Detached in its own process group so it outlives `cluster up` and jest's globalSetup; stopped by pid.
  const child = spawn(bin, args, { detached: true, stdio: ['ignore', fd, fd], cwd: stateDir });
  fs.closeSync(fd);
  child.unref();
  if (!child.pid) throw new Error(`cluster: could not start ${bin}`);
  return child.pid;
}

export function isAlive(pid: number | undefined): boolean {
  if (!pid) return false;
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  // A zombie or a recycled pid is not ours.
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    return !/^\d+ \(.*\) Z /.test(stat);
  } catch {
    return true;
  }
}

/** True when pid runs one of our binaries with stateDir on its command line (guards against recycled pids). */
function ownsPid(pid: number, stateDir: string): boolean {
  try {
    return fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes(stateDir);
  } catch {
    return false;
  }
}

interface HttpResult {
  status: number;
  body: string;
}

function httpsGet(url: string, certDir: string | undefined, timeoutMs = 2000): Promise<HttpResult> {
  return new Promise((resolve, reject) => {
    const tls = certDir
      ? {
          ca: fs.readFileSync(path.join(certDir, 'ca.crt')),
          cert: fs.readFileSync(path.join(certDir, 'admin.crt')),
          key: fs.readFileSync(path.join(certDir, 'admin.key')),
        }
      : { rejectUnauthorized: false };
    const req = https.get(url, { ...tls, timeout: timeoutMs, agent: false }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => {
        body += c;
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      res.on('error', reject);
    });
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', reject);
  });
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

function tailLog(stateDir: string, name: string, lines = 25): string {
  try {
    return fs
      .readFileSync(path.join(stateDir, 'logs', `${name}.log`), 'utf8')
      .trimEnd()
      .split('\n')
      .slice(-lines)
      .join('\n');
  } catch {
    return '(no log)';
  }
}

async function waitFor(what: string, deadline: number, check: () => Promise<boolean>, alive: () => string | undefined): Promise<void> {
  let lastErr = '';
  while (Date.now() < deadline) {
    const dead = alive();
    if (dead) throw new Error(`cluster: ${dead} exited while waiting for ${what}`);
    try {
      if (await check()) return;
    } catch (err) {
      lastErr = (err as Error).message;
    }
    await sleep(100);
  }
  throw new Error(`cluster: timed out waiting for ${what}${lastErr ? ` (last error: ${lastErr})` : ''}`);
}

export function readState(stateDir: string = defaultStateDir()): ClusterInfo | undefined {
  try {
    return JSON.parse(fs.readFileSync(path.join(stateDir, 'state.json'), 'utf8')) as ClusterInfo;
  } catch {
    return undefined;
  }
}

/**
 * Starts etcd, kube-apiserver and (by default) kube-controller-manager with only the garbage collector, on free
 * loopback ports, and waits until the API server is ready and the default namespace exists.
 */
export async function startCluster(opts: ClusterOptions = {}): Promise<ClusterInfo> {
  const t0 = Date.now();
  const log = opts.log ?? ((): void => undefined);
  const version = opts.version ?? process.env.CNIKIT_K8S_VERSION ?? DEFAULT_K8S_VERSION;
  const binDir = ensureBinaries({ ...opts, version });
  const tStart = Date.now();
  const stateDir = path.resolve(opts.stateDir ?? defaultStateDir());
  const certDir = freshStateDir(stateDir);

  const [etcdPort, peerPort, apiPort, kcmPort] = await Promise.all([freePort(), freePort(), freePort(), freePort()]);
  const etcdUrl = `http://127.0.0.1:${etcdPort}`;
  const bin = (b: string): string => path.join(binDir, b);
  const pids: ClusterInfo['pids'] = { etcd: 0, apiserver: 0 };
  const dead = (): string | undefined => deadProcess(stateDir, pids);
  try {
    pids.etcd = startProcess(stateDir, 'etcd', bin('etcd'), etcdArgs(stateDir, etcdUrl, `http://127.0.0.1:${peerPort}`));
    // One deadline for the whole start-up, counted from etcd's spawn.
    const deadline = Date.now() + (opts.readyTimeoutMs ?? 60_000);
    await waitFor('etcd', deadline, () => etcdHealthy(etcdUrl), dead);
    log(`cluster: etcd ready on ${etcdUrl}`);

    pids.apiserver = startProcess(stateDir, 'apiserver', bin('kube-apiserver'), apiServerArgs(opts, etcdUrl, apiPort, certDir));
    const server = `https://127.0.0.1:${apiPort}`;
    await waitForApiServer(server, certDir, deadline, dead);
    log(`cluster: kube-apiserver ready on ${server} after ${Date.now() - tStart} ms`);

    const kubeconfig = path.join(stateDir, 'kubeconfig');
    fs.writeFileSync(kubeconfig, kubeconfigYaml(server, certDir), { mode: 0o600 });

    let controllerManagerPort: number | undefined;
    if (opts.garbageCollector ?? true) {
      controllerManagerPort = kcmPort;
      await startControllerManager(stateDir, bin('kube-controller-manager'), pids, kubeconfig, kcmPort, deadline);
      log(`cluster: kube-controller-manager (garbage collector) healthy on 127.0.0.1:${kcmPort}`);
    }

    const info: ClusterInfo = {
      version,
      stateDir,
      kubeconfig,
      server,
      etcd: etcdUrl,
      caFile: path.join(certDir, 'ca.crt'),
      pids,
      controllerManagerPort,
      startupMs: Date.now() - t0,
      startedAt: new Date(t0).toISOString(),
    };
    fs.writeFileSync(path.join(stateDir, 'state.json'), JSON.stringify(info, null, 2));
    return info;
  } catch (err) {
    killAll(pids);
    throw err;
  }
}

/** Empties `stateDir` (refusing while a cluster recorded there still runs) and makes the certificates; returns their folder. */
function freshStateDir(stateDir: string): string {
  const previous = readState(stateDir);
  if (previous && (isAlive(previous.pids.apiserver) || isAlive(previous.pids.etcd))) {
    throw new Error(`cluster: already running with state in ${stateDir} (stop it first)`);
  }
  fs.rmSync(stateDir, { recursive: true, force: true });
  fs.mkdirSync(stateDir, { recursive: true, mode: 0o700 });
  const certDir = path.join(stateDir, 'pki');
  makeCerts(certDir);
  return certDir;
}

/** A start-up that failed half-way leaves nothing running. */
function killAll(pids: ClusterInfo['pids']): void {
  for (const pid of [pids.controllerManager, pids.apiserver, pids.etcd]) {
    if (pid && isAlive(pid))
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        /* gone */
      }
  }
}

/** The first started process that died, with the tail of its log (what a wait reports instead of timing out). */
function deadProcess(stateDir: string, pids: ClusterInfo['pids']): string | undefined {
  for (const [name, pid] of Object.entries(pids)) {
    if (pid && !isAlive(pid)) return `${name} (log ${path.join(stateDir, 'logs', `${name}.log`)}):\n${tailLog(stateDir, name)}`;
  }
  return undefined;
}

function etcdArgs(stateDir: string, etcdUrl: string, peerUrl: string): string[] {
  return [
    '--name=cnikit',
    `--data-dir=${path.join(stateDir, 'etcd')}`,
    `--listen-client-urls=${etcdUrl}`,
    `--advertise-client-urls=${etcdUrl}`,
    `--listen-peer-urls=${peerUrl}`,
    `--initial-advertise-peer-urls=${peerUrl}`,
    `--initial-cluster=cnikit=${peerUrl}`,
    '--unsafe-no-fsync=true',
    '--log-level=warn',
  ];
}

async function etcdHealthy(etcdUrl: string): Promise<boolean> {
  const res = await new Promise<number>((resolve, reject) => {
    const req = http.get(`${etcdUrl}/health`, { timeout: 1000, agent: false }, (r) => {
      r.resume();
      resolve(r.statusCode ?? 0);
    });
    req.on('error', reject);
    req.on('timeout', () => req.destroy(new Error('timeout')));
  });
  return res === 200;
}

function apiServerArgs(opts: ClusterOptions, etcdUrl: string, apiPort: number, certDir: string): string[] {
  return [
    `--etcd-servers=${etcdUrl}`,
    '--bind-address=127.0.0.1',
    '--advertise-address=127.0.0.1',
    `--secure-port=${apiPort}`,
    // A loopback advertise address is refused by the endpoint reconciler (it would publish it as the
    // kubernetes Service's endpoint); nothing here needs that endpoint.
    '--endpoint-reconciler-type=none',
    `--cert-dir=${certDir}`,
    `--tls-cert-file=${path.join(certDir, 'apiserver.crt')}`,
    `--tls-private-key-file=${path.join(certDir, 'apiserver.key')}`,
    `--client-ca-file=${path.join(certDir, 'ca.crt')}`,
    '--authorization-mode=AlwaysAllow',
    `--service-account-key-file=${path.join(certDir, 'sa.pub')}`,
    `--service-account-signing-key-file=${path.join(certDir, 'sa.key')}`,
    '--service-account-issuer=https://kubernetes.default.svc.cluster.local',
    // No kube-proxy runs: only tools/node-lab's relay answers on the kubernetes Service's address (10.0.0.1:443).
    '--service-cluster-ip-range=10.0.0.0/24',
    '--allow-privileged=true',
    // No token/serviceaccount controllers run, so pods must not wait for a default ServiceAccount.
    ...(opts.serviceAccounts ? [] : ['--disable-admission-plugins=ServiceAccount']),
    ...(opts.apiServerArgs ?? []),
  ];
}

/** kube-controller-manager running only the garbage collector (ownerReference cascades); its pid goes into `pids` at once. */
async function startControllerManager(
  stateDir: string,
  bin: string,
  pids: ClusterInfo['pids'],
  kubeconfig: string,
  port: number,
  deadline: number,
): Promise<void> {
  pids.controllerManager = startProcess(stateDir, 'controllerManager', bin, [
    `--kubeconfig=${kubeconfig}`,
    '--controllers=garbage-collector-controller',
    '--leader-elect=false',
    '--use-service-account-credentials=false',
    '--bind-address=127.0.0.1',
    `--secure-port=${port}`,
    `--cert-dir=${path.join(stateDir, 'kcm-certs')}`,
  ]);
  await waitFor(
    'kube-controller-manager /healthz',
    deadline,
    async () => (await httpsGet(`https://127.0.0.1:${port}/healthz`, undefined)).status === 200,
    () => deadProcess(stateDir, pids),
  );
}

/** Ready means /readyz answers 200 and the default namespace exists (clients create objects there at once). */
async function waitForApiServer(server: string, certDir: string, deadline: number, dead: () => string | undefined): Promise<void> {
  await waitFor('kube-apiserver /readyz', deadline, async () => (await httpsGet(`${server}/readyz`, certDir)).status === 200, dead);
  await waitFor(
    'namespace default',
    deadline,
    async () => (await httpsGet(`${server}/api/v1/namespaces/default`, certDir)).status === 200,
    dead,
  );
}

/** SIGTERM, then SIGKILL after graceMs; only when the pid still runs a command line containing `owner` (a dir of ours). */
export async function stopPid(pid: number | undefined, owner: string, graceMs = 10_000): Promise<void> {
  if (!pid || !isAlive(pid) || !ownsPid(pid, owner)) return;
  try {
    process.kill(pid, 'SIGTERM');
  } catch {
    return;
  }
  const deadline = Date.now() + graceMs;
  while (Date.now() < deadline && isAlive(pid)) await sleep(50);
  if (isAlive(pid))
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      /* gone */
    }
  while (isAlive(pid) && Date.now() < deadline + 5000) await sleep(20);
}

/**
 * Restarts the API server the way an upgrade or a crash-looping static pod does: SIGTERM, then the same command
 * line on the same port; every client's watch breaks and has to come back. Waits until it is ready again.
 */
export async function restartApiServer(info: ClusterInfo, readyTimeoutMs = 60_000): Promise<void> {
  const argv = fs.readFileSync(`/proc/${info.pids.apiserver}/cmdline`, 'utf8').split('\0').filter(Boolean);
  await stopPid(info.pids.apiserver, info.stateDir, 10_000);
  info.pids.apiserver = startProcess(info.stateDir, 'apiserver', argv[0]!, argv.slice(1));
  fs.writeFileSync(path.join(info.stateDir, 'state.json'), JSON.stringify(info, null, 2));
  const dead = (): string | undefined => deadProcess(info.stateDir, info.pids);
  await waitForApiServer(info.server, path.join(info.stateDir, 'pki'), Date.now() + readyTimeoutMs, dead);
}

/** Stops the processes recorded in stateDir (controller manager, API server, then etcd) and removes the state. */
export async function stopCluster(target: string | ClusterInfo = defaultStateDir(), opts: { keepState?: boolean } = {}): Promise<boolean> {
  const stateDir = typeof target === 'string' ? path.resolve(target) : target.stateDir;
  const info = typeof target === 'string' ? readState(stateDir) : target;
  if (info) {
    await stopPid(info.pids.controllerManager, stateDir, 5000);
    await stopPid(info.pids.apiserver, stateDir, 5000);
    await stopPid(info.pids.etcd, stateDir, 5000);
  }
  if (!opts.keepState) fs.rmSync(stateDir, { recursive: true, force: true });
  return info !== undefined;
}

export interface ClusterStatus {
  stateDir: string;
  running: boolean;
  ready: boolean;
  info?: ClusterInfo;
  processes: Record<string, { pid: number; alive: boolean }>;
}

export async function clusterStatus(stateDir: string = defaultStateDir()): Promise<ClusterStatus> {
  const info = readState(stateDir);
  const processes: ClusterStatus['processes'] = {};
  if (!info) return { stateDir, running: false, ready: false, processes };
  for (const [name, pid] of Object.entries(info.pids)) {
    if (pid) processes[name] = { pid, alive: isAlive(pid) && ownsPid(pid, info.stateDir) };
  }
  const running = Object.values(processes).some((p) => p.alive);
  let ready = false;
  if (processes.apiserver?.alive) {
    try {
      ready = (await httpsGet(`${info.server}/readyz`, path.join(info.stateDir, 'pki'))).status === 200;
    } catch {
      ready = false;
    }
  }
  return { stateDir, running, ready, info, processes };
}
