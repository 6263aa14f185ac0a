// Real Kubernetes nodes for the test API server of `npm run cluster`: kubelet + containerd 2.x + runc on this
// machine, each node isolated like a machine of its own (the recipe verified in shared/notes/real-node.md):
//
//   node kl-<x>   own network namespace kl-<x> (eth0 198.51.100.1x on the fabric bridge of netns kl-fab), own
//                 mount namespace (a file under <lab>/ns) hiding the host paths kubelet and containerd hard-code,
//                 own containerd + kubelet state, sockets, CNI bin and conf dirs under <lab>/<x>/, cgroup root
//                 /kl-<x> (kubelet kills pod cgroups of its kubepods it does not know: no sharing).
//   host leg      kl-h0 198.51.100.1 in the host netns: the API server reaches kubelets (exec, logs).
//   API server    reached from each node at its host URL through a relay (relay.ts) listening in the node netns.
//   scheduler     one kube-scheduler in the host netns, so Deployments and DaemonSets get placed.
//
// Everything the lab changes on the host is recorded in <lab>/state.json; `downNodes` undoes it and reports
// what is left (hostLeaks). One lab per machine: netns, cgroup and link names are fixed.
//
// Run by Node 24's type stripping (tools/cluster/cluster.mjs) and by jest: erasable TypeScript, Node built-ins.
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as https from 'node:https';
import * as net from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import {
  busyboxImage,
  createCgroupRoot,
  hasCommand,
  hostLeaks,
  isAlive,
  pidsMentioning,
  removeCgroupRoot,
  restoreSysctls,
  run,
  sleep,
  snapshotHost,
  stopPid,
  tryRun,
  HOST_MOUNT_POINTS,
  type Baseline,
} from './host.ts';
import { containerdConfig, kubeletConfig, bridgeConflist } from './configs.ts';

export const PREFIX = 'kl';
export const FABRIC_NETNS = `${PREFIX}-fab`;
export const HOST_LINK = `${PREFIX}-h0`;
export const HOST_IP = '198.51.100.1';
export const IMAGE = 'lab.local/busybox:1.35';
export const MAX_NODES = 8;
// CommonJS under jest (__dirname); ES module under Node's type stripping, where cluster.mjs sets CNIKIT_REPO_ROOT.
const ROOT = typeof __dirname === 'string' ? path.resolve(__dirname, '..', '..') : (process.env.CNIKIT_REPO_ROOT ?? process.cwd());

export interface LabNode {
  name: string;
  /** Short id: a, b, ... (dir <lab>/<id>). */
  id: string;
  ip: string;
  /** Pod subnet of the bridge network (10.244.<i+1>.0/24). */
  podSubnet: string;
  netns: string;
  dir: string;
  mountNs: string;
  cniBinDir: string;
  cniConfDir: string;
  containerdSocket: string;
  pids: Record<string, number>;
  /** How each node daemon was started (restartInNode starts it again the same way). */
  commands?: Record<string, { argv: string[]; env: Record<string, string> }>;
}

export interface Lab {
  dir: string;
  clusterDir: string;
  kubeconfig: string;
  server: string;
  apiPort: number;
  caFile: string;
  nodes: LabNode[];
  /** Host-netns daemons (kube-scheduler, and whatever startHostDaemon records). */
  pids: Record<string, number>;
  bins: Record<string, string>;
  baseline: Baseline;
  cni: 'bridge' | 'none';
  upMs?: number;
}

export interface UpOptions {
  clusterDir: string;
  nodes: number;
  /** 'bridge': Debian bridge + host-local per node, routed between nodes (Nodes become Ready). 'none': no conflist. */
  cni?: 'bridge' | 'none';
  /** How long to wait for every Node to register (and be Ready with cni 'bridge'). Default 180 s. */
  readyTimeoutMs?: number;
  log?: (msg: string) => void;
}

export const labDirOf = (clusterDir: string): string => `${path.resolve(clusterDir)}-nodes`;

export function readLab(dir: string): Lab | undefined {
  try {
    return JSON.parse(fs.readFileSync(path.join(dir, 'state.json'), 'utf8')) as Lab;
  } catch {
    return undefined;
  }
}

function saveLab(lab: Lab): void {
  fs.writeFileSync(path.join(lab.dir, 'state.json.tmp'), JSON.stringify(lab, null, 2));
  fs.renameSync(path.join(lab.dir, 'state.json.tmp'), path.join(lab.dir, 'state.json'));
}

/** Builds (cached) or finds kubelet, kube-scheduler, kubectl, containerd, shim, ctr, crictl. */
export function ensureNodeBinaries(log: (m: string) => void): Record<string, string> {
  const script = path.join(ROOT, 'tools', 'node-lab', 'build.sh');
  log(`nodes: checking binaries (${script}; builds once, cached in ~/.cache/cnikit)`);
  const out = run('bash', [script], { timeoutMs: 3_600_000 });
  const kv = Object.fromEntries(
    out
      .split('\n')
      .filter((l) => l.includes('='))
      .map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]),
  );
  const bins: Record<string, string> = {
    kubelet: kv.KUBELET,
    kubeScheduler: kv.KUBE_SCHEDULER,
    kubectl: kv.KUBECTL,
    containerdDir: kv.CONTAINERD_BIN_DIR,
    containerd: path.join(kv.CONTAINERD_BIN_DIR, 'containerd'),
    ctr: path.join(kv.CONTAINERD_BIN_DIR, 'ctr'),
    crictl: kv.CRICTL,
  };
  for (const [k, v] of Object.entries(bins)) if (!v || !fs.existsSync(v)) throw new Error(`nodes: ${k} missing after ${script}`);
  // optional: built only where the Multus source tree is (shared/third_party/multus-cni)
  if (kv.MULTUS && fs.existsSync(kv.MULTUS)) bins.multus = kv.MULTUS;
  return bins;
}

/** What a node needs from Debian; a message naming the package when something is missing. */
export function missingPrerequisites(): string[] {
  const missing: string[] = [];
  if (process.getuid?.() !== 0) missing.push('root (network and mount namespaces, cgroups)');
  for (const [cmd, pkg] of [
    ['runc', 'runc'],
    ['busybox', 'busybox-static'],
    ['nsenter', 'util-linux'],
    ['unshare', 'util-linux'],
    ['openssl', 'openssl'],
    ['ip', 'iproute2'],
    ['iptables', 'iptables'],
    ['go', 'Go (/usr/local/go)'],
  ]) {
    if (!hasCommand(cmd)) missing.push(`${cmd} (${pkg})`);
  }
  for (const p of ['bridge', 'host-local', 'loopback', 'portmap']) {
    if (!fs.existsSync(`/usr/lib/cni/${p}`)) missing.push(`/usr/lib/cni/${p} (containernetworking-plugins)`);
  }
  return missing;
}

function readCluster(clusterDir: string): { kubeconfig: string; server: string; caFile: string; stateDir: string; version: string } {
  const file = path.join(clusterDir, 'state.json');
  if (!fs.existsSync(file)) throw new Error(`nodes: no cluster state in ${clusterDir} (start it with npm run cluster -- up)`);
  return JSON.parse(fs.readFileSync(file, 'utf8'));
}

function nodeSpec(labDir: string, i: number): LabNode {
  const id = String.fromCharCode(97 + i);
  const dir = path.join(labDir, id);
  return {
    name: `${PREFIX}-${id}`,
    id,
    ip: `198.51.100.${11 + i}`,
    podSubnet: `10.244.${i + 1}.0/24`,
    netns: `${PREFIX}-${id}`,
    dir,
    mountNs: path.join(labDir, 'ns', id),
    cniBinDir: path.join(dir, 'cni', 'bin'),
    cniConfDir: path.join(dir, 'cni', 'net.d'),
    containerdSocket: path.join(dir, 'containerd', 'containerd.sock'),
    pids: {},
  };
}

/** Adds `nodes` real nodes to the running cluster of `clusterDir`; returns the lab (also saved in <lab>/state.json). */
export async function upNodes(opts: UpOptions): Promise<Lab> {
  const t0 = Date.now();
  const log = opts.log ?? ((): void => undefined);
  if (!(opts.nodes >= 1 && opts.nodes <= MAX_NODES)) throw new Error(`nodes: --nodes must be 1..${MAX_NODES}`);
  const missing = missingPrerequisites();
  if (missing.length) throw new Error(`nodes: missing prerequisites: ${missing.join(', ')} (bash tools/ci/setup.sh installs them)`);
  const cluster = readCluster(opts.clusterDir);
  const dir = labDirOf(cluster.stateDir);
  const existing = readLab(dir);
  if (existing) {
    if (existing.nodes.length === opts.nodes && existing.nodes.every((n) => isAlive(n.pids.kubelet))) return existing;
    log(`nodes: a lab is left in ${dir}: tearing it down first`);
    await downNodes(dir, { log });
  }
  const bins = ensureNodeBinaries(log);
  const image = busyboxImage(path.join(os.homedir(), '.cache', 'cnikit', 'node-image'), IMAGE);
  fs.rmSync(dir, { recursive: true, force: true });
  fs.mkdirSync(path.join(dir, 'logs'), { recursive: true });
  const apiPort = Number(new URL(cluster.server).port);
  const lab: Lab = {
    dir,
    clusterDir: cluster.stateDir,
    kubeconfig: cluster.kubeconfig,
    server: cluster.server,
    apiPort,
    caFile: cluster.caFile,
    nodes: [],
    pids: {},
    bins,
    baseline: snapshotHost(),
    cni: opts.cni ?? 'bridge',
  };
  saveLab(lab);
  try {
    createFabric(lab);
    prepareMountNamespaces(lab);
    const relay = bundleRelay(lab);
    for (let i = 0; i < opts.nodes; i++) {
      const node = nodeSpec(dir, i);
      lab.nodes.push(node);
      await startNode(lab, node, relay, image, log);
      saveLab(lab);
    }
    if (lab.cni === 'bridge') {
      for (const node of lab.nodes) writeBridgeNetwork(node);
      routePodSubnets(lab);
    }
    await startScheduler(lab, cluster.version);
    saveLab(lab);
    await waitNodes(lab, lab.cni === 'bridge', opts.readyTimeoutMs ?? 180_000, log);
    lab.upMs = Date.now() - t0;
    saveLab(lab);
    return lab;
  } catch (err) {
    log(`nodes: up failed: ${(err as Error).message}; tearing down (logs are copied to ${dir}.failed-logs)`);
    fs.cpSync(path.join(dir, 'logs'), `${dir}.failed-logs`, { recursive: true, force: true });
    await downNodes(dir, { log });
    throw err;
  }
}

function createFabric(lab: Lab): void {
  run('ip', ['netns', 'add', FABRIC_NETNS]);
  run('ip', ['-n', FABRIC_NETNS, 'link', 'set', 'lo', 'up']);
  run('ip', ['-n', FABRIC_NETNS, 'link', 'add', 'fab0', 'type', 'bridge']);
  run('ip', ['-n', FABRIC_NETNS, 'link', 'set', 'fab0', 'up']);
  run('ip', ['link', 'add', HOST_LINK, 'type', 'veth', 'peer', 'name', 'host', 'netns', FABRIC_NETNS]);
  run('ip', ['-n', FABRIC_NETNS, 'link', 'set', 'host', 'master', 'fab0', 'up']);
  run('ip', ['addr', 'add', `${HOST_IP}/24`, 'dev', HOST_LINK]);
  run('ip', ['link', 'set', HOST_LINK, 'up']);
  fs.writeFileSync(path.join(lab.dir, 'logs', 'fabric'), `${FABRIC_NETNS} ${HOST_LINK}\n`);
}

/** The node's NIC on the fabric, and the sysctls of a freshly booted machine (the CNI must enable what it needs). */
function createNodeNetns(node: LabNode): void {
  run('ip', ['netns', 'add', node.netns]);
  run('ip', ['-n', FABRIC_NETNS, 'link', 'add', `${node.id}-eth0`, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', node.netns]);
  run('ip', ['-n', FABRIC_NETNS, 'link', 'set', `${node.id}-eth0`, 'master', 'fab0', 'up']);
  run('ip', ['-n', node.netns, 'link', 'set', 'lo', 'up']);
  run('ip', ['-n', node.netns, 'addr', 'add', `${node.ip}/24`, 'dev', 'eth0']);
  run('ip', ['-n', node.netns, 'link', 'set', 'eth0', 'up']);
  // the kubernetes Service's ClusterIP, answered by the relay (no kube-proxy runs in the lab)
  run('ip', ['-n', node.netns, 'addr', 'add', '10.0.0.1/32', 'dev', 'lo']);
  const sysctls = [
    'net.ipv4.ip_forward=0',
    'net.ipv4.conf.all.rp_filter=0',
    'net.ipv4.conf.default.rp_filter=0',
    'net.ipv4.conf.all.arp_ignore=0',
    'net.ipv4.conf.default.arp_ignore=0',
    'net.ipv4.conf.all.arp_announce=0',
    'net.ipv4.conf.default.arp_announce=0',
  ];
  run('nsenter', [`--net=/run/netns/${node.netns}`, 'sysctl', '-qw', ...sysctls]);
}

/** A namespace file must live on a private mount: <lab>/ns is bound onto itself and made private. */
function prepareMountNamespaces(lab: Lab): void {
  const nsDir = path.join(lab.dir, 'ns');
  fs.mkdirSync(nsDir, { recursive: true });
  run('mount', ['--bind', nsDir, nsDir]);
  run('mount', ['--make-private', nsDir]);
  for (const p of HOST_MOUNT_POINTS) fs.mkdirSync(p, { recursive: true });
}

/** Where a node keeps its copy of host path `p`: the CNI dirs are the node's own, the rest under host_<path>. */
function hostDirOf(node: LabNode, p: string): string {
  if (p === '/opt/cni/bin') return node.cniBinDir;
  if (p === '/etc/cni/net.d') return node.cniConfDir;
  return path.join(node.dir, `host${p.replace(/\//g, '_')}`);
}

function createMountNamespace(node: LabNode): void {
  // The host's own mounts under these paths (e.g. /run/netns of `ip netns`) are detached first: hidden under the
  // binds they would still be found by path (containerd refuses /run/netns when it finds the host's private one).
  const detach = HOST_MOUNT_POINTS.map(
    (p) => `findmnt -rn -o TARGET | grep -E '^${p}(/|$)' | sort -r | while read -r m; do umount -l "$m"; done`,
  );
  const binds = HOST_MOUNT_POINTS.map((p) => {
    fs.mkdirSync(hostDirOf(node, p), { recursive: true });
    // shared, as systemd makes every mount of a real host: a pod may mount a host path Bidirectional (Multus's
    // install_multus does /opt/cni/bin), which containerd refuses on a private mount
    return `mount --bind '${hostDirOf(node, p)}' '${p}' && mount --make-shared '${p}'`;
  });
  // Pod netns files (containerd mounts them under /run/netns) must propagate into node daemons' containers that
  // mount /run/netns with HostToContainer (coild): a shared mount, as `ip netns` makes it on a real host.
  binds.push('mkdir -p /run/netns', 'mount --bind /run/netns /run/netns', 'mount --make-shared /run/netns');
  fs.writeFileSync(node.mountNs, '');
  run('unshare', [`--mount=${node.mountNs}`, '--propagation', 'private', 'sh', '-ec', [...detach, ...binds].join('\n')]);
}

/** Starts `argv` detached inside the node's mount and network namespaces; nsenter execs, so the pid is the daemon's. */
export function startInNode(lab: Lab, node: LabNode, name: string, argv: string[], env: NodeJS.ProcessEnv = {}): number {
  const pid = spawnLogged(
    lab,
    `${node.id}-${name}`,
    'nsenter',
    [`--mount=${node.mountNs}`, `--net=/run/netns/${node.netns}`, '--', ...argv],
    env,
  );
  node.pids[name] = pid;
  node.commands = { ...node.commands, [name]: { argv, env: env as Record<string, string> } };
  saveLab(lab);
  return pid;
}

/** Stops a node daemon the lab started (SIGTERM, as an init system would; SIGKILL after 30 s). */
export async function stopInNode(lab: Lab, node: LabNode, name: string): Promise<void> {
  if (!node.commands?.[name]) throw new Error(`nodes: ${name} of ${node.name} was not started by the lab`);
  await stopPid(node.pids[name], lab.dir, 30_000);
}

/**
 * Starts a stopped node daemon again with the same command line; a containerd is waited for until it serves,
 * as systemd orders kubelet after containerd (a kubelet that finds no CRI socket exits).
 */
export async function startAgainInNode(lab: Lab, node: LabNode, name: string): Promise<number> {
  const cmd = node.commands?.[name];
  if (!cmd) throw new Error(`nodes: ${name} of ${node.name} was not started by the lab`);
  const pid = startInNode(lab, node, name, cmd.argv, cmd.env);
  if (name === 'containerd') await containerdServing(lab, node);
  return pid;
}

/** Stops a node daemon and starts it again with the same command line (systemctl restart). */
export async function restartInNode(lab: Lab, node: LabNode, name: string): Promise<number> {
  await stopInNode(lab, node, name);
  return startAgainInNode(lab, node, name);
}

/** Starts `argv` detached in the host namespaces, recorded so that downNodes stops it. */
export function startOnHost(lab: Lab, name: string, argv: string[], env: NodeJS.ProcessEnv = {}): number {
  const pid = spawnLogged(lab, name, argv[0], argv.slice(1), env);
  lab.pids[name] = pid;
  saveLab(lab);
  return pid;
}

function spawnLogged(lab: Lab, log: string, cmd: string, args: string[], env: NodeJS.ProcessEnv): number {
  const fd = fs.openSync(path.join(lab.dir, 'logs', `${log}.log`), 'a');
  // The lab dir on the command line marks the process as the lab's (stopPid and the leak check look for it).
  const child = spawn(cmd, args, { detached: true, stdio: ['ignore', fd, fd], env: { ...process.env, ...env, CNIKIT_NODE_LAB: lab.dir } });
  fs.closeSync(fd);
  child.unref();
  if (!child.pid) throw new Error(`nodes: could not start ${cmd}`);
  return child.pid;
}

/** The last `lines` lines of a node daemon's log (for failure messages). */
export function nodeLogTail(lab: Lab, node: LabNode, name: string, lines = 40): string {
  try {
    return fs
      .readFileSync(path.join(lab.dir, 'logs', `${node.id}-${name}.log`), 'utf8')
      .trimEnd()
      .split('\n')
      .slice(-lines)
      .join('\n');
  } catch (err) {
    return `(no ${name} log: ${(err as Error).message})`;
  }
}

/** Runs a program inside a node's namespaces and returns its stdout (throws on failure). */
export function nodeRun(node: LabNode, argv: string[]): string {
  return run('nsenter', [`--mount=${node.mountNs}`, `--net=/run/netns/${node.netns}`, '--', ...argv]);
}

/** nodeRun that never throws: whether it exited 0, its stdout, and stdout + stderr. */
export function nodeTryRun(node: LabNode, argv: string[]): { ok: boolean; stdout: string; out: string } {
  return tryRun('nsenter', [`--mount=${node.mountNs}`, `--net=/run/netns/${node.netns}`, '--', ...argv]);
}

export function crictl(lab: Lab, node: LabNode, args: string[]): string {
  return run(lab.bins.crictl, ['-r', `unix://${node.containerdSocket}`, '-t', '20s', ...args]);
}

async function startNode(lab: Lab, node: LabNode, relay: string, image: string, log: (m: string) => void): Promise<void> {
  log(`nodes: starting ${node.name} (${node.ip})`);
  createNodeNetns(node);
  for (const d of [node.cniBinDir, node.cniConfDir, path.join(node.dir, 'cni', 'ipam'), path.join(node.dir, 'kubelet', 'pki')]) {
    fs.mkdirSync(d, { recursive: true });
  }
  fs.copyFileSync('/usr/lib/cni/loopback', path.join(node.cniBinDir, 'loopback'));
  createMountNamespace(node);
  createCgroupRoot(node.name);
  fs.writeFileSync(path.join(node.dir, 'containerd.toml'), containerdConfig(node.dir, IMAGE));
  startInNode(lab, node, 'containerd', [lab.bins.containerd, '--config', path.join(node.dir, 'containerd.toml')], {
    PATH: `${lab.bins.containerdDir}:${process.env.PATH}`,
  });
  // The relay runs on the host (it reaches the API server there) and puts only its listening socket in the node.
  node.pids.relay = spawnLogged(lab, `${node.id}-relay`, process.execPath, [relay, `/run/netns/${node.netns}`, String(lab.apiPort)], {});
  await containerdServing(lab, node);
  run(lab.bins.ctr, ['-a', node.containerdSocket, '-n', 'k8s.io', 'images', 'import', image]);
  nodeCredentials(lab, node);
  fs.writeFileSync(path.join(node.dir, 'kubelet', 'config.yaml'), kubeletConfig(node, lab.caFile));
  startInNode(lab, node, 'kubelet', [
    lab.bins.kubelet,
    `--config=${path.join(node.dir, 'kubelet', 'config.yaml')}`,
    `--kubeconfig=${path.join(node.dir, 'kubelet', 'kubeconfig')}`,
    `--root-dir=${path.join(node.dir, 'kubelet', 'root')}`,
    `--cert-dir=${path.join(node.dir, 'kubelet', 'pki')}`,
    `--hostname-override=${node.name}`,
    `--node-ip=${node.ip}`,
    '--v=1',
  ]);
}

/** Waits until a node's containerd answers on its CRI socket (kubelet exits at once when it does not). */
async function containerdServing(lab: Lab, node: LabNode): Promise<void> {
  let last = '';
  await waitUntil(
    () => `containerd of ${node.name} (crictl info: ${last})`,
    60_000,
    () => {
      const r = tryRun(lab.bins.crictl, ['-r', `unix://${node.containerdSocket}`, 'info']);
      last = r.out.slice(-300);
      return r.ok;
    },
    () => deadDaemon(lab, node),
  );
}

function deadDaemon(lab: Lab, node: LabNode): string | undefined {
  for (const [name, pid] of Object.entries(node.pids)) {
    if (!isAlive(pid))
      return `${name} of ${node.name} exited (log ${lab.dir}/logs/${node.id}-${name}.log):\n${nodeLogTail(lab, node, name, 15)}`;
  }
  return undefined;
}

async function waitUntil(
  what: string | (() => string),
  timeoutMs: number,
  ok: () => boolean | Promise<boolean>,
  dead?: () => string | undefined,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const d = dead?.();
    if (d) throw new Error(`nodes: ${d}`);
    if (await ok()) return;
    await sleep(250);
  }
  throw new Error(`nodes: timed out after ${timeoutMs} ms waiting for ${typeof what === 'string' ? what : what()}`);
}

/** A client certificate system:node:<name> (group system:nodes) signed by the cluster CA, and its kubeconfig. */
function nodeCredentials(lab: Lab, node: LabNode): void {
  const pki = path.join(node.dir, 'kubelet', 'pki');
  const caDir = path.dirname(lab.caFile);
  run('openssl', [
    'req',
    '-new',
    '-newkey',
    'ec',
    '-pkeyopt',
    'ec_paramgen_curve:prime256v1',
    '-nodes',
    '-keyout',
    path.join(pki, 'node.key'),
    '-out',
    path.join(pki, 'node.csr'),
    '-subj',
    `/O=system:nodes/CN=system:node:${node.name}`,
  ]);
  fs.writeFileSync(path.join(pki, 'node.ext'), 'keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n');
  run('openssl', [
    'x509',
    '-req',
    '-in',
    path.join(pki, 'node.csr'),
    '-CA',
    lab.caFile,
    '-CAkey',
    path.join(caDir, 'ca.key'),
    '-CAserial',
    path.join(lab.dir, 'ca.srl'),
    '-CAcreateserial',
    '-days',
    '365',
    '-out',
    path.join(pki, 'node.crt'),
    '-extfile',
    path.join(pki, 'node.ext'),
  ]);
  const b64 = (f: string): string => fs.readFileSync(f).toString('base64');
  fs.writeFileSync(
    path.join(node.dir, 'kubelet', 'kubeconfig'),
    [
      'apiVersion: v1',
      'kind: Config',
      'clusters:',
      `- name: lab`,
      '  cluster:',
      `    server: ${lab.server}`,
      `    certificate-authority-data: ${b64(lab.caFile)}`,
      'users:',
      `- name: ${node.name}`,
      '  user:',
      `    client-certificate-data: ${b64(path.join(pki, 'node.crt'))}`,
      `    client-key-data: ${b64(path.join(pki, 'node.key'))}`,
      'contexts:',
      '- name: lab',
      '  context:',
      '    cluster: lab',
      `    user: ${node.name}`,
      'current-context: lab',
      '',
    ].join('\n'),
    { mode: 0o600 },
  );
}

/** relay.ts imports netlib (setns addon): bundled with esbuild into the lab dir, the addon found at its build path. */
function bundleRelay(lab: Lab): string {
  const addon = path.join(ROOT, 'packages', 'netlib', 'native', 'build', 'Release', 'netns.node');
  if (!fs.existsSync(addon)) throw new Error(`nodes: ${addon} missing: run npm run build (or node-gyp in packages/netlib/native)`);
  const out = path.join(lab.dir, 'relay.cjs');
  const script = [
    "const { buildSync } = require('esbuild');",
    `buildSync({ entryPoints: [${JSON.stringify(path.join(ROOT, 'tools', 'node-lab', 'relay.ts'))}], bundle: true, platform: 'node',`,
    `  format: 'cjs', outfile: ${JSON.stringify(out)}, external: ['netlink'], logLevel: 'error',`,
    // netlib finds its addon relative to its own source file (native/index.ts); a bundle has no such file.
    `  define: { __dirname: ${JSON.stringify(JSON.stringify(path.join(ROOT, 'packages', 'netlib', 'src', 'native')))} } });`,
  ].join('\n');
  run(process.execPath, ['-e', script], { env: { ...process.env, NODE_PATH: path.join(ROOT, 'node_modules') } });
  return out;
}

/** Imports an image archive (docker-archive or OCI, `npm run images`) into every node's containerd: no registry. */
export function importImage(lab: Lab, file: string): void {
  for (const node of lab.nodes)
    run(lab.bins.ctr, ['-a', node.containerdSocket, '-n', 'k8s.io', 'images', 'import', file], { timeoutMs: 300_000 });
}

/** Debian bridge + host-local with the node's pod subnet (CNI 1.0.0: what Debian's plugins speak). */
export function writeBridgeNetwork(node: LabNode): void {
  for (const p of ['bridge', 'host-local', 'portmap']) fs.copyFileSync(`/usr/lib/cni/${p}`, path.join(node.cniBinDir, p));
  writeFileAtomic(path.join(node.cniConfDir, '10-lab-bridge.conflist'), bridgeConflist(node));
}

/** Debian's plugins (containernetworking-plugins) into a node's CNI bin dir, each by rename: never half a file. */
export function installDebianPlugins(node: LabNode, names: string[]): void {
  for (const p of names) {
    const tmp = path.join(node.cniBinDir, `.${p}.tmp`);
    fs.copyFileSync(`/usr/lib/cni/${p}`, tmp);
    fs.chmodSync(tmp, 0o755);
    fs.renameSync(tmp, path.join(node.cniBinDir, p));
  }
}

/** Writes via a temp name and rename: containerd watches the conf dir and must never read half a file. */
export function writeFileAtomic(file: string, content: string): void {
  const tmp = path.join(path.dirname(file), `.${path.basename(file)}.tmp`);
  fs.writeFileSync(tmp, content);
  fs.renameSync(tmp, file);
}

/** Each node routes the other nodes' pod subnets to their fabric address (what a routed L2 segment does). */
export function routePodSubnets(lab: Lab): void {
  for (const node of lab.nodes) {
    for (const other of lab.nodes) {
      if (other !== node) run('ip', ['-n', node.netns, 'route', 'replace', other.podSubnet, 'via', other.ip, 'dev', 'eth0']);
    }
  }
}

/** The VPC's router on the fabric (a cloud's alias and secondary IPs are routed by the VPC, not by the nodes). */
export const VPC_ROUTER_IP = '198.51.100.254';

/**
 * A cloud VPC routing `cidr` for the nodes: every node sends it to the fabric's router, which routes each alias
 * range to the VM holding it. The routes come and go with the cloud emulator's alias hooks (vpcAliasHooks), as the
 * VPC follows an alias from one VM to another. They live in the fabric namespace: downNodes removes them with it.
 */
export function routeThroughVpc(lab: Lab, cidr: string): void {
  if (!tryRun('ip', ['-n', FABRIC_NETNS, 'addr', 'show', 'dev', 'fab0']).stdout.includes(`${VPC_ROUTER_IP}/`)) {
    run('ip', ['-n', FABRIC_NETNS, 'addr', 'add', `${VPC_ROUTER_IP}/24`, 'dev', 'fab0']);
    fabricRoutes();
  }
  for (const node of lab.nodes) run('ip', ['-n', node.netns, 'route', 'replace', cidr, 'via', VPC_ROUTER_IP, 'dev', 'eth0']);
}

/**
 * Fixes the fabric bridge's MAC. A bridge takes the lowest MAC of its ports unless given one: a cloud NIC's
 * (00:16:3e:... on Alibaba Cloud, 02:... from moto) plugged into it would change the gateway's MAC under the nodes
 * and flush every neighbour of the bridge, the VPC's permanent ones included.
 */
export function pinFabricMac(): void {
  const mac = /link\/ether ([0-9a-f:]+)/.exec(run('ip', ['-n', FABRIC_NETNS, 'link', 'show', 'dev', 'fab0']))?.[1];
  if (!mac) throw new Error(`${FABRIC_NETNS}: fab0 has no MAC`);
  run('ip', ['-n', FABRIC_NETNS, 'link', 'set', 'fab0', 'address', mac]);
}

/** The fabric namespace as the VPC's router: forwarding on, no redirects, no reverse-path filter. */
export function fabricRoutes(): void {
  run('nsenter', [
    `--net=/run/netns/${FABRIC_NETNS}`,
    'sysctl',
    '-qw',
    'net.ipv4.ip_forward=1',
    // a router that forwards back out of the port it received on would otherwise tell nodes to go direct
    'net.ipv4.conf.all.send_redirects=0',
    'net.ipv4.conf.fab0.send_redirects=0',
    // a node may ask for a gateway from a link without an address of its own (an ENI: a source on another link)
    'net.ipv4.conf.all.rp_filter=0',
    'net.ipv4.conf.fab0.rp_filter=0',
  ]);
}

/** Shell commands for the GCE emulator's --on-alias-add / --on-alias-remove (ALIAS_RANGE, NETWORK_IP): the VPC's routes. */
export function vpcAliasHooks(): { add: string; remove: string } {
  return {
    add: `ip -n ${FABRIC_NETNS} route replace "$ALIAS_RANGE" via "$NETWORK_IP"`,
    // only the route to this VM: a late removal must not take the route of the VM the alias has moved to
    remove: `ip -n ${FABRIC_NETNS} route del "$ALIAS_RANGE" via "$NETWORK_IP" 2>/dev/null || true`,
  };
}

/** Controllers that turn workloads into pods (the cluster's own controller manager runs only the GC). */
const WORKLOAD_CONTROLLERS = [
  'deployment-controller',
  'replicaset-controller',
  'daemonset-controller',
  'statefulset-controller',
  'job-controller',
  'endpointslice-controller',
  // default ServiceAccounts and the kube-root-ca.crt ConfigMap: what pods using in-cluster config mount
  'serviceaccount-controller',
  'root-ca-certificate-publisher-controller',
  // removes the not-ready taint kubelet registers with once the Node is Ready (else nothing is scheduled)
  'node-lifecycle-controller',
];

/** kube-scheduler places pods, a second kube-controller-manager runs the workload controllers; both on the host. */
async function startScheduler(lab: Lab, version: string): Promise<void> {
  const auth = [
    `--kubeconfig=${lab.kubeconfig}`,
    `--authentication-kubeconfig=${lab.kubeconfig}`,
    `--authorization-kubeconfig=${lab.kubeconfig}`,
    '--leader-elect=false',
    '--bind-address=127.0.0.1',
  ];
  startOnHost(lab, 'kube-scheduler', [
    lab.bins.kubeScheduler,
    ...auth,
    `--secure-port=${await freePort()}`,
    `--cert-dir=${path.join(lab.dir, 'scheduler-certs')}`,
  ]);
  const kcm = path.join(
    process.env.CNIKIT_K8S_BIN_DIR ?? path.join(os.homedir(), '.cache', 'cnikit', 'k8s', version),
    'kube-controller-manager',
  );
  startOnHost(lab, 'kube-controller-manager', [
    kcm,
    ...auth,
    `--secure-port=${await freePort()}`,
    `--controllers=${WORKLOAD_CONTROLLERS.join(',')}`,
    '--use-service-account-credentials=false',
    `--root-ca-file=${lab.caFile}`,
    `--cert-dir=${path.join(lab.dir, 'kcm-certs')}`,
  ]);
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const a = srv.address();
      srv.close(() => (typeof a === 'object' && a ? resolve(a.port) : reject(new Error('no port'))));
    });
  });
}

/** The fields of API answers the lab reads. */
export interface ApiObject {
  metadata?: { name: string };
  items?: ApiObject[];
  status?: { conditions?: { type: string; status: string; reason?: string; message?: string }[] };
}

/** GET/DELETE/POST on the API server with the admin certificate of the cluster. */
export function api(lab: Lab, method: string, p: string, body?: unknown): Promise<{ status: number; json: ApiObject }> {
  const pki = path.dirname(lab.caFile);
  return new Promise((resolve, reject) => {
    const req = https.request(
      `${lab.server}${p}`,
      {
        method,
        ca: fs.readFileSync(lab.caFile),
        cert: fs.readFileSync(path.join(pki, 'admin.crt')),
        key: fs.readFileSync(path.join(pki, 'admin.key')),
        headers: { 'content-type': 'application/json' },
        timeout: 10_000,
        agent: false,
      },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => {
          text += c;
        });
        res.on('end', () => {
          try {
            resolve({ status: res.statusCode ?? 0, json: text ? (JSON.parse(text) as ApiObject) : {} });
          } catch {
            resolve({ status: res.statusCode ?? 0, json: {} }); // not JSON (an error page): nothing to read
          }
        });
      },
    );
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', reject);
    req.end(body === undefined ? undefined : JSON.stringify(body));
  });
}

/** The Ready condition of a Node: {status, reason, message}, or undefined when it is not registered. */
export async function nodeReady(lab: Lab, name: string): Promise<{ status: string; reason: string; message: string } | undefined> {
  const r = await api(lab, 'GET', `/api/v1/nodes/${name}`);
  if (r.status !== 200) return undefined;
  const c = (r.json.status?.conditions ?? []).find((x) => x.type === 'Ready');
  return c ? { status: c.status, reason: c.reason ?? '', message: c.message ?? '' } : { status: 'Unknown', reason: '', message: '' };
}

async function waitNodes(lab: Lab, ready: boolean, timeoutMs: number, log: (m: string) => void): Promise<void> {
  for (const node of lab.nodes) {
    await waitUntil(
      `Node ${node.name} ${ready ? 'Ready' : 'registered'}`,
      timeoutMs,
      async () => {
        const c = await nodeReady(lab, node.name).catch(() => undefined);
        return c !== undefined && (!ready || c.status === 'True');
      },
      () => deadDaemon(lab, node),
    );
    log(`nodes: ${node.name} ${ready ? 'Ready' : 'registered'}`);
  }
}

export interface DownOptions {
  log?: (m: string) => void;
  /** Copy the daemons' logs (kubelet, containerd, relays) to this directory before the lab dir is removed. */
  keepLogs?: string;
}

/** Deletes the workloads and pods (kubelet sends CNI DEL), stops everything, restores the host; returns the leaks. */
export async function downNodes(dir: string, opts: DownOptions = {}): Promise<string[]> {
  const log = opts.log ?? ((): void => undefined);
  const lab = readLab(dir);
  if (!lab) return [];
  const t0 = Date.now();
  const step = (m: string): void => log(`nodes: down +${Date.now() - t0} ms: ${m}`);
  if (opts.keepLogs) fs.cpSync(path.join(lab.dir, 'logs'), opts.keepLogs, { recursive: true, force: true });
  await drainPods(lab, log);
  step('pods deleted; stopping kubelets');
  for (const node of lab.nodes) await stopPid(node.pids.kubelet, lab.dir, 15_000);
  step('removing sandboxes left');
  for (const node of lab.nodes) {
    if (isAlive(node.pids.containerd)) {
      const r = tryRun(lab.bins.crictl, ['-r', `unix://${node.containerdSocket}`, '-t', '30s', 'rmp', '-af']);
      if (!r.ok) log(`nodes: crictl rmp on ${node.name}: ${r.out}`);
    }
  }
  step('stopping containerd, relays, daemons');
  for (const node of lab.nodes) for (const [name, pid] of Object.entries(node.pids)) if (name !== 'kubelet') await stopPid(pid, lab.dir);
  for (const pid of Object.values(lab.pids)) await stopPid(pid, lab.dir);
  step('cgroups, mounts, namespaces');
  for (const pid of pidsMentioning(lab.dir))
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      /* gone */
    }
  const left: string[] = [];
  for (const node of lab.nodes) left.push(...(await removeCgroupRoot(node.name)));
  await undoHost(lab, left, log);
  const leaks = hostLeaks(lab.baseline, lab.dir, PREFIX);
  if (leaks.length === 0) fs.rmSync(lab.dir, { recursive: true, force: true });
  else log(`nodes: left on the host (lab dir ${lab.dir} kept):\n  ${leaks.join('\n  ')}`);
  return leaks;
}

async function undoHost(lab: Lab, cgroupsLeft: string[], log: (m: string) => void): Promise<void> {
  const nsDir = path.join(lab.dir, 'ns');
  for (const node of lab.nodes) tryRun('umount', [node.mountNs]);
  tryRun('umount', [nsDir]);
  for (const node of lab.nodes) tryRun('ip', ['netns', 'del', node.netns]);
  tryRun('ip', ['netns', 'del', FABRIC_NETNS]);
  tryRun('ip', ['link', 'del', HOST_LINK]);
  // Processes killed late (a shim) may have held a cgroup: try once more after the namespaces are gone.
  if (cgroupsLeft.length) for (const node of lab.nodes) await removeCgroupRoot(node.name);
  restoreSysctls(lab.baseline);
  for (const d of [...lab.baseline.createdDirs].reverse()) {
    try {
      fs.rmdirSync(d);
    } catch (err) {
      log(`nodes: ${d}: ${(err as Error).message}`);
    }
  }
}

/** Deletes controllers and pods in every namespace, then waits (bounded) until no node has a ready sandbox. */
async function drainPods(lab: Lab, log: (m: string) => void): Promise<void> {
  if (!lab.nodes.some((n) => isAlive(n.pids.kubelet))) return;
  try {
    const nsList = await api(lab, 'GET', '/api/v1/namespaces');
    for (const ns of (nsList.json?.items ?? []).map((x) => x.metadata!.name)) {
      for (const res of [
        'apis/apps/v1/namespaces/NS/daemonsets',
        'apis/apps/v1/namespaces/NS/deployments',
        'apis/apps/v1/namespaces/NS/replicasets',
        'apis/apps/v1/namespaces/NS/statefulsets',
        'apis/batch/v1/namespaces/NS/jobs',
      ]) {
        await api(lab, 'DELETE', `/${res.replace('NS', ns)}`);
      }
      await api(lab, 'DELETE', `/api/v1/namespaces/${ns}/pods?gracePeriodSeconds=1`);
    }
  } catch (err) {
    log(`nodes: deleting pods: ${(err as Error).message}`);
  }
  const deadline = Date.now() + 60_000;
  for (const node of lab.nodes) {
    while (Date.now() < deadline && isAlive(node.pids.containerd)) {
      const r = tryRun(lab.bins.crictl, ['-r', `unix://${node.containerdSocket}`, 'pods', '-q', '--state', 'ready']);
      if (!r.ok || r.stdout === '') break;
      await sleep(250);
    }
  }
}

/** Lines `up` prints per node. */
export function describe(lab: Lab): string[] {
  return lab.nodes.map(
    (n) =>
      `NODE ${n.name} ip=${n.ip} netns=${n.netns} CNI_BIN_DIR=${n.cniBinDir} CNI_CONF_DIR=${n.cniConfDir} ` +
      `CONTAINERD_SOCKET=unix://${n.containerdSocket}`,
  );
}
