// Host-side helpers of the node lab: running programs, processes by pid, cgroup hierarchies, sysctls, and the
// snapshot of host state that `down` restores and the leak check compares against.
//
// Run directly by Node 24 (type stripping, from tools/cluster/cluster.mjs) and through jest: erasable TypeScript
// only, Node built-ins only.
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { isAlive, stopPid } from '../../testing/kube/src/cluster.ts';

// process helpers shared with the test control plane
export { isAlive, stopPid };

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Runs a program, returns stdout; throws with its stderr when it fails. */
export function run(cmd: string, args: string[], opts: { input?: string; env?: NodeJS.ProcessEnv; timeoutMs?: number } = {}): string {
  const r = spawnSync(cmd, args, {
    input: opts.input,
    env: opts.env,
    encoding: 'utf8',
    timeout: opts.timeoutMs ?? 120_000,
    maxBuffer: 64 << 20,
  });
  if (r.error) throw new Error(`${cmd} ${args.join(' ')}: ${r.error.message}`);
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(' ')}: exit ${r.status ?? r.signal}: ${(r.stderr || r.stdout).trim()}`);
  return r.stdout;
}

/** Like run() but never throws: for teardown steps whose target may already be gone. */
export function tryRun(cmd: string, args: string[], timeoutMs = 60_000): { ok: boolean; stdout: string; out: string } {
  const r = spawnSync(cmd, args, { encoding: 'utf8', timeout: timeoutMs });
  return { ok: r.status === 0, stdout: (r.stdout ?? '').trim(), out: `${r.stdout ?? ''}${r.stderr ?? ''}`.trim() };
}

export function hasCommand(cmd: string): boolean {
  return spawnSync('sh', ['-c', `command -v ${cmd}`], { stdio: 'ignore' }).status === 0;
}

export function cmdline(pid: number): string {
  try {
    return fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').replace(/\0/g, ' ');
  } catch {
    return '';
  }
}

/** Pids whose command line mentions `needle` (the lab dir: containerd shims, daemons), except this process. */
export function pidsMentioning(needle: string): number[] {
  const pids: number[] = [];
  for (const d of fs.readdirSync('/proc')) {
    const pid = Number(d);
    if (!Number.isInteger(pid) || pid === process.pid || pid === process.ppid) continue;
    if (cmdline(pid).includes(needle) && isAlive(pid)) pids.push(pid);
  }
  return pids;
}

/** Mount points of every cgroup (v1) and cgroup2 hierarchy of this host. */
export function cgroupMounts(): Array<{ dir: string; v2: boolean; cpuset: boolean }> {
  const seen = new Map<string, { dir: string; v2: boolean; cpuset: boolean }>();
  for (const line of fs.readFileSync('/proc/self/mountinfo', 'utf8').split('\n')) {
    const [pre, post] = line.split(' - ');
    if (!post) continue;
    const [fstype, , superOpts = ''] = post.split(' ');
    if (fstype !== 'cgroup' && fstype !== 'cgroup2') continue;
    const dir = pre.split(' ')[4];
    seen.set(dir, { dir, v2: fstype === 'cgroup2', cpuset: superOpts.split(',').includes('cpuset') });
  }
  return [...seen.values()];
}

/** Creates the cgroup root `name` in every hierarchy (kubelet refuses a cgroupRoot that does not exist). */
export function createCgroupRoot(name: string): void {
  const mounts = cgroupMounts();
  const pureV2 = mounts.length === 1 && mounts[0].v2;
  for (const m of mounts) {
    const dir = path.join(m.dir, name);
    fs.mkdirSync(dir, { recursive: true });
    if (m.cpuset) {
      // A new v1 cpuset starts empty and admits no task until it has cpus and mems.
      for (const f of ['cpuset.cpus', 'cpuset.mems']) fs.writeFileSync(path.join(dir, f), fs.readFileSync(path.join(m.dir, f)));
    }
    if (pureV2 && m.v2) {
      // On a unified-only host kubelet needs the controllers delegated below its root.
      const ctrls = fs.readFileSync(path.join(m.dir, 'cgroup.subtree_control'), 'utf8').trim().split(/\s+/).filter(Boolean);
      for (const c of ctrls)
        try {
          fs.writeFileSync(path.join(dir, 'cgroup.subtree_control'), `+${c}`);
        } catch {
          /* not delegable */
        }
    }
  }
}

function cgroupTree(dir: string): string[] {
  const out: string[] = [];
  const walk = (d: string): void => {
    let entries: fs.Dirent[];
    try {
      entries = fs.readdirSync(d, { withFileTypes: true });
    } catch {
      return;
    }
    for (const e of entries) if (e.isDirectory()) walk(path.join(d, e.name));
    out.push(d);
  };
  walk(dir);
  return out; // children before parents
}

/** Kills every process in cgroup root `name` (all hierarchies), then removes the tree, deepest first. */
export async function removeCgroupRoot(name: string): Promise<string[]> {
  const left: string[] = [];
  for (let attempt = 0; attempt < 50; attempt++) {
    left.length = 0;
    for (const m of cgroupMounts()) {
      for (const dir of cgroupTree(path.join(m.dir, name))) {
        if (!fs.existsSync(dir)) continue;
        for (const pid of readPids(dir))
          try {
            process.kill(pid, 'SIGKILL');
          } catch {
            /* gone */
          }
        try {
          fs.rmdirSync(dir);
        } catch {
          left.push(dir);
        }
      }
    }
    if (left.length === 0) return [];
    await sleep(100);
  }
  return left;
}

function readPids(dir: string): number[] {
  try {
    return fs.readFileSync(path.join(dir, 'cgroup.procs'), 'utf8').split('\n').filter(Boolean).map(Number);
  } catch {
    return [];
  }
}

/** Host-wide (not per netns) settings kubelet writes at start-up; `down` puts the saved values back. */
export const KUBELET_SYSCTLS = [
  'vm/overcommit_memory',
  'vm/panic_on_oom',
  'kernel/panic',
  'kernel/panic_on_oops',
  'kernel/keys/root_maxkeys',
  'kernel/keys/root_maxbytes',
];
/** Checked by the leak check as well (the bridge plugin must have changed it only inside node netns). */
const CHECKED_SYSCTLS = [...KUBELET_SYSCTLS, 'net/ipv4/ip_forward'];
/**
 * Host paths each node gets its own copy of, bind-mounted in its mount namespace (created on the host if absent):
 * those kubelet and containerd use whatever their config says, /run (sockets of node daemons such as
 * /run/coild.sock, pod netns under /run/netns) and the standard CNI dirs, so that manifests written for real
 * nodes (hostPath /opt/cni/bin, /etc/cni/net.d, /run) work unchanged.
 */
export const HOST_MOUNT_POINTS = ['/var/lib/kubelet', '/var/log/containers', '/var/lib/cni', '/run', '/opt/cni/bin', '/etc/cni/net.d'];

/** `p` and its ancestors that do not exist, outermost first (what mkdir -p would create). */
function missingDirs(p: string): string[] {
  const out: string[] = [];
  for (let d = p; !fs.existsSync(d); d = path.dirname(d)) out.unshift(d);
  return out;
}

export interface Baseline {
  sysctls: Record<string, string>;
  /** HOST_MOUNT_POINTS that did not exist before the lab (removed by down when empty). */
  createdDirs: string[];
  links: string[];
  nftTables: string[];
  iptablesKube: number;
  rules: string;
}

export function readSysctl(key: string): string {
  return fs.readFileSync(path.join('/proc/sys', key), 'utf8').trim();
}

function hostLinks(): string[] {
  return run('ip', ['-o', 'link', 'show'])
    .split('\n')
    .filter(Boolean)
    .map((l) => l.split(':')[1].trim().split('@')[0])
    .sort();
}

function nftTables(): string[] {
  return hasCommand('nft') ? run('nft', ['list', 'tables']).split('\n').filter(Boolean).sort() : [];
}

function iptablesKube(): number {
  if (!hasCommand('iptables-save')) return 0;
  return run('iptables-save', [])
    .split('\n')
    .filter((l) => /KUBE|CNI/.test(l)).length;
}

export function snapshotHost(): Baseline {
  const sysctls: Record<string, string> = {};
  for (const k of CHECKED_SYSCTLS) sysctls[k] = readSysctl(k);
  return {
    sysctls,
    createdDirs: HOST_MOUNT_POINTS.flatMap(missingDirs),
    links: hostLinks(),
    nftTables: nftTables(),
    iptablesKube: iptablesKube(),
    rules: run('ip', ['rule']),
  };
}

export function restoreSysctls(base: Baseline): void {
  for (const k of KUBELET_SYSCTLS) {
    const want = base.sysctls[k];
    if (want !== undefined && readSysctl(k) !== want) fs.writeFileSync(path.join('/proc/sys', k), want);
  }
}

/** What the lab left on the host compared with `base`: one line per leak, empty when the host is as before. */
export function hostLeaks(base: Baseline, labDir: string, prefix: string): string[] {
  const leaks: string[] = [];
  const mounts = fs
    .readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .filter((l) => l.includes(labDir));
  if (mounts.length) leaks.push(`mounts under ${labDir}: ${mounts.length}`);
  const links = hostLinks();
  const newLinks = links.filter((l) => !base.links.includes(l));
  if (newLinks.length) leaks.push(`links: ${newLinks.join(' ')}`);
  const ns = fs.existsSync('/run/netns') ? fs.readdirSync('/run/netns').filter((n) => n.startsWith(`${prefix}-`)) : [];
  if (ns.length) leaks.push(`netns: ${ns.join(' ')}`);
  for (const m of cgroupMounts()) {
    const left = fs.readdirSync(m.dir).filter((d) => d.startsWith(`${prefix}-`));
    if (left.length) leaks.push(`cgroups in ${m.dir}: ${left.join(' ')}`);
  }
  for (const d of base.createdDirs) if (fs.existsSync(d)) leaks.push(`dir ${d} (created by the lab)`);
  const tables = nftTables();
  if (tables.join('\n') !== base.nftTables.join('\n')) leaks.push(`nft tables: ${tables.join(', ')}`);
  const kube = iptablesKube();
  if (kube !== base.iptablesKube) leaks.push(`iptables KUBE/CNI lines: ${kube} (before: ${base.iptablesKube})`);
  const rules = run('ip', ['rule']);
  if (rules !== base.rules) leaks.push(`ip rules changed: ${rules.trim().replace(/\n/g, '; ')}`);
  for (const [k, v] of Object.entries(base.sysctls)) {
    const now = readSysctl(k);
    if (now !== v) leaks.push(`sysctl ${k} = ${now} (before: ${v})`);
  }
  const procs = pidsMentioning(labDir);
  if (procs.length) leaks.push(`processes: ${procs.map((p) => `${p} ${cmdline(p).slice(0, 80)}`).join('; ')}`);
  return leaks;
}

/** The docker-archive image every node imports (no registry): busybox-static + applet links, also the sandbox image. */
export function busyboxImage(cacheDir: string, tag: string): string {
  const busybox = run('sh', ['-c', 'command -v busybox']).trim();
  const real = fs.realpathSync(busybox);
  const st = fs.statSync(real);
  const file = path.join(cacheDir, `busybox-${st.size}-${Math.floor(st.mtimeMs)}.tar`);
  if (fs.existsSync(file)) return file;
  if (fs.readFileSync(real).includes('/lib64/ld-linux')) throw new Error(`${real} is dynamically linked: install busybox-static`);
  fs.mkdirSync(cacheDir, { recursive: true });
  const work = fs.mkdtempSync(path.join(cacheDir, '.img-'));
  try {
    const rootfs = path.join(work, 'rootfs');
    for (const d of ['bin', 'etc', 'tmp', 'root', 'proc', 'sys', 'dev']) fs.mkdirSync(path.join(rootfs, d), { recursive: true });
    fs.copyFileSync(real, path.join(rootfs, 'bin', 'busybox'));
    fs.chmodSync(path.join(rootfs, 'bin', 'busybox'), 0o755);
    for (const applet of run(real, ['--list-full']).split('\n').filter(Boolean)) {
      const p = path.join(rootfs, applet);
      if (applet === 'bin/busybox' || fs.existsSync(p)) continue;
      fs.mkdirSync(path.dirname(p), { recursive: true });
      fs.symlinkSync('/bin/busybox', p);
    }
    fs.writeFileSync(path.join(rootfs, 'etc', 'passwd'), 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n');
    fs.writeFileSync(path.join(rootfs, 'etc', 'group'), 'root:x:0:\nnogroup:x:65534:\n');
    const img = path.join(work, 'img');
    fs.mkdirSync(img);
    run('tar', [
      '--numeric-owner',
      '--owner=0',
      '--group=0',
      '--sort=name',
      '--mtime=@0',
      '-C',
      rootfs,
      '-cf',
      path.join(img, 'layer.tar'),
      '.',
    ]);
    const diffId = `sha256:${run('sha256sum', [path.join(img, 'layer.tar')]).split(' ')[0]}`;
    const config = JSON.stringify({
      architecture: 'amd64',
      os: 'linux',
      created: '1970-01-01T00:00:00Z',
      config: { Env: ['PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'], Cmd: ['/bin/sleep', 'infinity'] },
      rootfs: { type: 'layers', diff_ids: [diffId] },
    });
    fs.writeFileSync(path.join(img, 'config.json'), config);
    const cfgName = `${run('sha256sum', [path.join(img, 'config.json')]).split(' ')[0]}.json`;
    fs.renameSync(path.join(img, 'config.json'), path.join(img, cfgName));
    fs.writeFileSync(path.join(img, 'manifest.json'), JSON.stringify([{ Config: cfgName, RepoTags: [tag], Layers: ['layer.tar'] }]));
    const tmp = `${file}.${process.pid}.tmp`;
    run('tar', ['--numeric-owner', '--owner=0', '--group=0', '-C', img, '-cf', tmp, 'manifest.json', cfgName, 'layer.tar']);
    fs.renameSync(tmp, file);
    return file;
  } finally {
    fs.rmSync(work, { recursive: true, force: true });
  }
}
