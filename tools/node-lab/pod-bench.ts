// node tools/node-lab/pod-bench.ts [--family coil|gcp-ipam|terway|cilium-eni-ipam] [--pods N] [--idle-s S] [--op-ms MS]
//   [--call-ms MS]   (run by tools/bench/node-pods.mjs, node-pods-gcp.mjs, node-pods-terway.mjs and node-pods-cilium.mjs; root)
//
// One real node (kubelet + containerd, tools/node-lab) measured twice as a user meets it:
//   1. with Debian's bridge + host-local (Go, CNI 1.0.0) as the node's network;
//   2. the same node switched to Coil, installed from its image and manifests (packages/coil/config); or, with
//      --family gcp-ipam, to GKE's ptp conflist rewritten by gcp-ipam's installer (packages/gcp-ipam/config)
//      against the GCE emulator whose alias operations take --op-ms (GCE's take about 3 s), two waves of pods:
//      the first right after the install, the second once the first is deleted; or, with --family terway, to
//      terway installed from its image and manifests (packages/terway/config) against the Alibaba Cloud emulator
//      (every OpenAPI call --call-ms, an ENI attach --op-ms), two waves: with a cold pool (nothing idle, every
//      address asked for as pods come, and given back after), then with a warm one (eni_conf's min_pool_size
//      raised to N through the ConfigMap, which terwayd applies live, the pool full before the wave); or, with
//      --family cilium-eni-ipam, to cilium-eni-ipam from its image and manifests (packages/cilium-eni-ipam/config)
//      against moto behind the fault proxy adding --call-ms to every EC2 call (the AWS lab of e2e/node/cilium-lib.ts,
//      loaded from the esbuild bundle $CNIKIT_AWS_LAB), two waves: the pool at Cilium's default pre-allocation
//      (8), then pre-allocate raised to N on the CiliumNode and the pool full before the wave.
// Each time, first the node idle for S seconds: containerd's reaped children's CPU (cutime + cstime: the CNI
// calls it makes on its own, STATUS every ~5 s for a 1.1.0 conflist and never for bridge's 1.0.0, plus whatever
// else it reaps) and, with Coil, the STATUS calls coild counted; then N pods created at once (one `kubectl
// apply`), the time from that apply until each pod's Ready condition is True (seen through one `kubectl get
// -w`), and the pods deleted. Last, the CPU of one `coil` STATUS call, measured directly. Prints one JSON
// object on stdout; progress on stderr.
import { execFileSync, spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { parseArgs } from 'node:util';
import { startCluster, stopCluster } from '../../testing/kube/src/cluster.ts';
import { crictl, downNodes, importImage, installDebianPlugins, labDirOf, routeThroughVpc, upNodes, type Lab } from './lab.ts';
import { GCP, GKE_CONFLIST, gcpDeployYaml, startGceEmulator, writeGkeConflist, type Emulator } from './gcp.ts';
import { ALIYUN, labEniConf, startAliyunEmulator, terwayDeployYaml } from './aliyun.ts';

// an ES module under Node's type stripping: tools/bench/node-pods.mjs sets CNIKIT_REPO_ROOT
const root = process.env.CNIKIT_REPO_ROOT ?? process.cwd();
const { values: opt } = parseArgs({
  options: {
    family: { type: 'string', default: 'coil' },
    pods: { type: 'string', default: '30' },
    'idle-s': { type: 'string', default: '60' },
    'op-ms': { type: 'string', default: '3000' },
    'call-ms': { type: 'string', default: '200' },
  },
});
const MEASURES = { coil: measureCoil, 'gcp-ipam': measureGcpIpam, terway: measureTerway, 'cilium-eni-ipam': measureCilium };
if (!Object.hasOwn(MEASURES, opt.family!)) throw new Error(`--family: ${Object.keys(MEASURES).join(', ')}; not ${opt.family}`);
const PODS = Number(opt.pods);
const IDLE_S = Number(opt['idle-s']);
const log = (m: string): void => void process.stderr.write(`[pod-bench] ${m}\n`);
const CLK_TCK = 100; // USER_HZ: the unit of /proc/<pid>/stat times on Linux

function kubectl(lab: Lab, kubeconfig: string, args: string[], input?: string): string {
  return execFileSync(lab.bins.kubectl, args, {
    input,
    encoding: 'utf8',
    env: { ...process.env, KUBECONFIG: kubeconfig },
    timeout: 300_000,
  });
}

function podList(node: string, n: number): string {
  const pod = (i: number): unknown => ({
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name: `bench-${i}`, namespace: 'default', labels: { app: 'bench' } },
    spec: {
      nodeSelector: { 'kubernetes.io/hostname': node },
      terminationGracePeriodSeconds: 1,
      containers: [
        {
          name: 'bb',
          image: 'lab.local/busybox:1.35',
          imagePullPolicy: 'Never',
          command: ['sh', '-c', "trap 'exit 0' TERM; sleep 3600 & wait"],
        },
      ],
    },
  });
  return JSON.stringify({ apiVersion: 'v1', kind: 'List', items: Array.from({ length: n }, (_, i) => pod(i)) });
}

/** Creates N pods at once; returns each pod's ms from the apply to its Ready=True, as one watch saw it. */
async function createToReady(lab: Lab, kubeconfig: string): Promise<number[]> {
  const watch = spawn(
    lab.bins.kubectl,
    ['get', 'pods', '-l', 'app=bench', '-w', '-o', 'jsonpath={.metadata.name} {.status.conditions[?(@.type=="Ready")].status}{"\\n"}'],
    { env: { ...process.env, KUBECONFIG: kubeconfig }, stdio: ['ignore', 'pipe', 'inherit'] },
  );
  const ready = new Map<string, number>();
  let t0 = 0;
  const done = new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`only ${ready.size}/${PODS} pods Ready after 600 s`)), 600_000);
    let buf = '';
    watch.stdout.on('data', (chunk: Buffer) => {
      buf += chunk.toString();
      const lines = buf.split('\n');
      buf = lines.pop() ?? '';
      for (const line of lines) {
        const [name, status] = line.trim().split(' ');
        if (t0 && name && status === 'True' && !ready.has(name)) ready.set(name, performance.now() - t0);
      }
      if (ready.size === PODS) {
        clearTimeout(timer);
        resolve();
      }
    });
  });
  await new Promise((r) => setTimeout(r, 1000)); // the watch is established before the pods exist
  t0 = performance.now();
  kubectl(lab, kubeconfig, ['apply', '-f', '-'], podList(lab.nodes[0]!.name, PODS));
  try {
    await done;
  } finally {
    watch.kill();
  }
  kubectl(lab, kubeconfig, ['delete', 'pods', '-l', 'app=bench', '--wait=true', '--timeout=300s']);
  return [...ready.values()].sort((a, b) => a - b);
}

/** coild's count of STATUS calls it served (its go-grpc-prometheus counter), or 0 without coild. */
async function coildStatusCalls(lab: Lab): Promise<number> {
  try {
    const text = await (await fetch(`http://${lab.nodes[0]!.ip}:9384/metrics`)).text();
    return Number(/^grpc_server_started_total\{[^}]*grpc_method="Status"[^}]*\} (\S+)$/m.exec(text)?.[1] ?? 0);
  } catch {
    return 0;
  }
}

/**
 * Over S idle seconds before any test pod: CPU ms of containerd's reaped children (the CNI plugins it ran on
 * its own, and whatever else it reaped) and the STATUS calls coild served, both per minute.
 */
async function idleStatus(lab: Lab): Promise<{ cpuMsPerMin: number; callsPerMin: number }> {
  const pid = lab.nodes[0]!.pids.containerd!;
  const children = (): number => {
    const fields = fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
    return ((Number(fields[13]) + Number(fields[14])) * 1000) / CLK_TCK; // cutime, cstime (fields 16, 17)
  };
  await new Promise((r) => setTimeout(r, 20_000)); // the node's own pods (coild, controllers) settle
  const [cpu0, calls0] = [children(), await coildStatusCalls(lab)];
  await new Promise((r) => setTimeout(r, IDLE_S * 1000));
  const [cpu1, calls1] = [children(), await coildStatusCalls(lab)];
  return { cpuMsPerMin: ((cpu1 - cpu0) * 60) / IDLE_S, callsPerMin: ((calls1 - calls0) * 60) / IDLE_S };
}

const STATUS_RUNS = 20;

/**
 * CPU ms of one `coil` STATUS call as containerd makes it (in the node's namespaces, the conflist's config on
 * stdin): the calls are this process's children, so their CPU is the growth of our own cutime + cstime.
 */
function statusCallCpuMs(lab: Lab): number {
  const node = lab.nodes[0]!;
  const self = (): number => {
    const f = fs.readFileSync('/proc/self/stat', 'utf8').split(') ')[1]!.split(' ');
    return ((Number(f[13]) + Number(f[14])) * 1000) / CLK_TCK;
  };
  const conf = JSON.stringify({ cniVersion: '1.1.0', name: 'k8s-pod-network', type: 'coil', socket: '/run/coild.sock' });
  const before = self();
  for (let i = 0; i < STATUS_RUNS; i++) {
    // nsenter execs coil in place (no fork): the child is the plugin itself
    execFileSync('nsenter', [`--mount=${node.mountNs}`, `--net=/run/netns/${node.netns}`, '--', '/opt/cni/bin/coil'], {
      input: conf,
      env: { CNI_COMMAND: 'STATUS', CNI_PATH: '/opt/cni/bin' },
    });
  }
  return (self() - before) / STATUS_RUNS;
}

async function switchToCoil(lab: Lab, kubeconfig: string, image: string): Promise<void> {
  const node = lab.nodes[0]!;
  fs.rmSync(path.join(node.cniConfDir, '10-lab-bridge.conflist'));
  importImage(lab, image);
  const config = path.join(root, 'packages', 'coil', 'config');
  kubectl(lab, kubeconfig, ['apply', '-f', path.join(config, 'crds.yaml')]);
  kubectl(lab, kubeconfig, ['wait', '--for=condition=Established', 'crd/addresspools.coil.cybozu.com', '--timeout=60s']);
  kubectl(lab, kubeconfig, ['apply', '-f', path.join(config, 'rbac.yaml'), '-f', path.join(config, 'deploy.yaml')]);
  const pool = {
    apiVersion: 'coil.cybozu.com/v2',
    kind: 'AddressPool',
    metadata: { name: 'default' },
    spec: { blockSizeBits: 5, subnets: [{ ipv4: '10.100.0.0/16' }] },
  };
  kubectl(lab, kubeconfig, ['apply', '-f', '-'], JSON.stringify(pool));
  kubectl(lab, kubeconfig, ['-n', 'kube-system', 'rollout', 'status', 'daemonset/coild', '--timeout=300s']);
  // one replica available: its two hostNetwork replicas share ports, so one node runs only one of them
  kubectl(lab, kubeconfig, [
    '-n',
    'kube-system',
    'wait',
    '--for=jsonpath={.status.availableReplicas}=1',
    'deployment/coil-ipam-controller',
    '--timeout=300s',
  ]);
  kubectl(lab, kubeconfig, ['wait', '--for=condition=Ready', 'node', '--all', '--timeout=300s']);
}

/** The node switched to gcp-ipam as on GKE: its conflist, then crds, rbac and deploy.yaml (emulator endpoints). */
async function switchToGcpIpam(lab: Lab, kubeconfig: string, image: string, gce: Emulator): Promise<void> {
  const node = lab.nodes[0]!;
  fs.rmSync(path.join(node.cniConfDir, '10-lab-bridge.conflist'));
  writeGkeConflist(node);
  importImage(lab, image);
  const config = path.join(root, 'packages', 'gcp-ipam', 'config');
  kubectl(lab, kubeconfig, ['apply', '-f', path.join(config, 'crds.yaml'), '-f', path.join(config, 'rbac.yaml')]);
  kubectl(lab, kubeconfig, ['apply', '-f', '-'], gcpDeployYaml(root, gce.url));
  kubectl(lab, kubeconfig, ['-n', 'kube-system', 'wait', '--for=condition=Complete', 'job/gcp-ipam-provisioner', '--timeout=300s']);
  const pool = JSON.parse(kubectl(lab, kubeconfig, ['get', 'ippool', GCP.pool, '-o', 'json'])) as { spec: { cidr: string } };
  routeThroughVpc(lab, pool.spec.cidr);
  kubectl(lab, kubeconfig, ['-n', 'kube-system', 'rollout', 'status', 'daemonset/gcp-ipam-installer', '--timeout=300s']);
  for (let i = 0; !fs.readFileSync(path.join(node.cniConfDir, GKE_CONFLIST), 'utf8').includes('"gcp-ipam"'); i++) {
    if (i > 600) throw new Error('the installer did not rewrite the conflist in 60 s');
    await new Promise((r) => setTimeout(r, 100));
  }
  // one replica available: its two hostNetwork replicas share ports, so one node runs only one of them
  kubectl(lab, kubeconfig, [
    '-n',
    'kube-system',
    'wait',
    '--for=jsonpath={.status.availableReplicas}=1',
    'deployment/gcp-ipam-controller',
    '--timeout=300s',
  ]);
  kubectl(lab, kubeconfig, ['wait', '--for=condition=Ready', 'node', '--all', '--timeout=300s']);
}

/** The node switched to terway as on ACK: rbac and deploy.yaml, eni-config set for the emulator with a cold pool. */
async function switchToTerway(lab: Lab, kubeconfig: string, image: string, endpoint: string): Promise<void> {
  const node = lab.nodes[0]!;
  fs.rmSync(path.join(node.cniConfDir, '10-lab-bridge.conflist'));
  importImage(lab, image);
  const config = path.join(root, 'packages', 'terway', 'config');
  kubectl(lab, kubeconfig, ['apply', '-f', path.join(config, 'rbac.yaml')]);
  kubectl(lab, kubeconfig, ['apply', '-f', '-'], terwayDeployYaml(root, endpoint, { min_pool_size: 0, max_pool_size: 0 }));
  kubectl(lab, kubeconfig, ['-n', 'kube-system', 'rollout', 'status', 'daemonset/terway', '--timeout=300s']);
  kubectl(lab, kubeconfig, ['wait', '--for=condition=Ready', 'node', '--all', '--timeout=300s']);
}

/** VmRSS, VmHWM and RssAnon (KiB) of a container of the node, by its name (the node's containers are host processes). */
function containerMemory(lab: Lab, name: string): { rssKiB: number; hwmKiB: number; anonKiB: number } {
  const node = lab.nodes[0]!;
  const [id] = crictl(lab, node, ['ps', '--name', `^${name}$`, '-q'])
    .trim()
    .split('\n');
  if (!id) throw new Error(`no running container ${name} on ${node.name}`);
  const pid = (JSON.parse(crictl(lab, node, ['inspect', '-o', 'json', id])) as { info: { pid: number } }).info.pid;
  const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  const kib = (field: string): number => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? NaN);
  return { rssKiB: kib('VmRSS'), hwmKiB: kib('VmHWM'), anonKiB: kib('RssAnon') };
}

/** Private IPs the emulator holds on the secondary ENIs of the node's instance. */
async function cloudIps(endpoint: string): Promise<number> {
  const s = (await (await fetch(`http://${endpoint}/_emulator/state`)).json()) as {
    enis: { type: string; secondaryIps: string[]; instanceId?: string }[];
  };
  return s.enis.filter((e) => e.type === 'Secondary' && e.instanceId).reduce((n, e) => n + 1 + e.secondaryIps.length, 0);
}

async function measureTerway(lab: Lab, kubeconfig: string, image: string): Promise<unknown> {
  log(`bridge + host-local: ${PODS} pods`);
  const bridge = await createToReady(lab, kubeconfig);
  // room for the pods: three ENIs of 20 addresses besides the primary one
  const shape = ['--instance-type', `${ALIYUN.instanceType}=4,20`];
  const emu = started(
    await startAliyunEmulator(lab, root, [...shape, '--latency-ms', opt['call-ms']!, '--attach-delay-ms', opt['op-ms']!]),
  );
  try {
    log(`switching the node to terway (image + manifests; OpenAPI calls of ${opt['call-ms']} ms, attaches of ${opt['op-ms']} ms)`);
    await switchToTerway(lab, kubeconfig, image, emu.url);
    const idle = containerMemory(lab, 'terwayd');
    const cold = await createToReady(lab, kubeconfig);
    const warmPool = { min_pool_size: PODS, max_pool_size: PODS };
    kubectl(lab, kubeconfig, [
      '-n',
      'kube-system',
      'patch',
      'configmap',
      'eni-config',
      '--type',
      'merge',
      '-p',
      JSON.stringify({ data: { eni_conf: labEniConf(warmPool) } }),
    ]);
    for (let i = 0; (await cloudIps(emu.url)) < PODS; i++) {
      if (i > 1200) throw new Error(`the pool did not fill to ${PODS} in 120 s`);
      await new Promise((r) => setTimeout(r, 100));
    }
    const warm = await createToReady(lab, kubeconfig);
    const state = (await (await fetch(`http://${emu.url}/_emulator/state`)).json()) as { calls: number };
    return {
      pods: PODS,
      callMs: Number(opt['call-ms']),
      attachMs: Number(opt['op-ms']),
      bridge: summary(bridge),
      terwayCold: summary(cold),
      terwayWarm: summary(warm),
      openApiCalls: state.calls,
      terwayd: { idleKiB: idle.rssKiB, anonKiB: idle.anonKiB, peakKiB: containerMemory(lab, 'terwayd').hwmKiB },
    };
  } finally {
    await stopped(emu);
  }
}

/** What the benchmark uses of e2e/node/cilium-lib.ts (loaded bundled: it needs the AWS SDK and the workspace's TS). */
interface AwsLabModule {
  startAwsLab(
    lab: Lab,
    instanceType?: string,
  ): Promise<{ ec2: { rules: { action: string; latencyMs?: number }[]; total(): number }; stop(): Promise<void> }>;
  ciliumDeployYaml(root: string, aws: unknown, agentArgs?: string[]): string;
}

async function measureCilium(lab: Lab, kubeconfig: string, image: string): Promise<unknown> {
  if (!process.env.CNIKIT_AWS_LAB)
    throw new Error('CNIKIT_AWS_LAB: the bundle of e2e/node/cilium-lib.ts (tools/bench/node-pods-cilium.mjs makes it)');
  const awsLab = createRequire(path.join(root, 'package.json'))(process.env.CNIKIT_AWS_LAB) as AwsLabModule;
  log(`bridge + host-local: ${PODS} pods`);
  const bridge = await createToReady(lab, kubeconfig);
  // m5.xlarge: 3 ENIs of 14 addresses for pods (the node's own NIC carries none), room for 30 pods and 8 spare
  const aws = started(await awsLab.startAwsLab(lab, 'm5.xlarge'));
  try {
    aws.ec2.rules.push({ action: '*', latencyMs: Number(opt['call-ms']) });
    log(`switching the node to cilium-eni-ipam (image + manifests; EC2 calls of ${opt['call-ms']} ms)`);
    const node = lab.nodes[0]!;
    fs.rmSync(path.join(node.cniConfDir, '10-lab-bridge.conflist'));
    installDebianPlugins(node, ['ptp']);
    importImage(lab, image);
    const config = path.join(root, 'packages', 'cilium-eni-ipam', 'config');
    kubectl(lab, kubeconfig, ['apply', '-f', path.join(config, 'crds.yaml')]);
    kubectl(lab, kubeconfig, ['wait', '--for=condition=Established', 'crd/ciliumnodes.cilium.io', '--timeout=60s']);
    kubectl(lab, kubeconfig, ['apply', '-f', path.join(config, 'rbac.yaml')]);
    const secret = ['--from-literal=access-key-id=testing', '--from-literal=secret-access-key=testing'];
    kubectl(lab, kubeconfig, ['-n', 'kube-system', 'create', 'secret', 'generic', 'cilium-eni-operator-aws', ...secret]);
    kubectl(lab, kubeconfig, ['apply', '-f', '-'], awsLab.ciliumDeployYaml(root, aws, []));
    kubectl(lab, kubeconfig, ['-n', 'kube-system', 'rollout', 'status', 'daemonset/cilium-eni-agent', '--timeout=300s']);
    await poolOf(lab, kubeconfig, node.name, 8);
    kubectl(lab, kubeconfig, ['wait', '--for=condition=Ready', 'node', '--all', '--timeout=300s']);
    const idle = { agent: containerMemory(lab, 'agent'), operator: containerMemory(lab, 'operator') };
    const cold = await createToReady(lab, kubeconfig);
    const patch = JSON.stringify({ spec: { ipam: { 'pre-allocate': PODS } } });
    kubectl(lab, kubeconfig, ['patch', 'ciliumnode', node.name, '--type', 'merge', '-p', patch]);
    await poolOf(lab, kubeconfig, node.name, PODS);
    const warm = await createToReady(lab, kubeconfig);
    return {
      pods: PODS,
      callMs: Number(opt['call-ms']),
      bridge: summary(bridge),
      ciliumDefault: summary(cold),
      ciliumWarm: summary(warm),
      ec2Calls: aws.ec2.total(),
      agent: { idleKiB: idle.agent.rssKiB, anonKiB: idle.agent.anonKiB, peakKiB: containerMemory(lab, 'agent').hwmKiB },
      operator: { idleKiB: idle.operator.rssKiB, anonKiB: idle.operator.anonKiB, peakKiB: containerMemory(lab, 'operator').hwmKiB },
    };
  } finally {
    await stopped(aws);
  }
}

/** Waits until the node's CiliumNode pool holds `n` addresses on ENIs the operator has described (10 min at most). */
async function poolOf(lab: Lab, kubeconfig: string, node: string, n: number): Promise<void> {
  type Cn = { spec: { ipam?: { pool?: Record<string, { resource?: string }> } }; status?: { eni?: { enis?: Record<string, unknown> } } };
  for (let i = 0; ; i++) {
    let cn: Cn | undefined;
    try {
      cn = JSON.parse(kubectl(lab, kubeconfig, ['get', 'ciliumnode', node, '-o', 'json'])) as Cn;
    } catch {
      cn = undefined; // the agent has not created it yet
    }
    const enis = cn?.status?.eni?.enis ?? {};
    const usable = Object.values(cn?.spec.ipam?.pool ?? {}).filter((v) => v.resource !== undefined && v.resource in enis).length;
    if (usable >= n) return;
    if (i > 600) throw new Error(`the pool of ${node} did not reach ${n} in 10 min (${usable})`);
    await new Promise((r) => setTimeout(r, 1000));
  }
}

const pct = (xs: number[], p: number): number => xs[Math.min(xs.length - 1, Math.ceil((p / 100) * xs.length) - 1)]!;
const summary = (xs: number[]): { p50: number; p99: number; max: number } => ({
  p50: pct(xs, 50),
  p99: pct(xs, 99),
  max: xs[xs.length - 1]!,
});

function buildImage(family: string): string {
  const out = execFileSync(process.execPath, [path.join(root, 'tools', 'images', 'images.mjs'), family], {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  return out.trim().split(' ')[1]!;
}

async function measureCoil(lab: Lab, kubeconfig: string, image: string): Promise<unknown> {
  log(`bridge + host-local: idle ${IDLE_S} s, then ${PODS} pods`);
  const bridgeIdle = await idleStatus(lab);
  const bridge = await createToReady(lab, kubeconfig);
  log('switching the node to Coil (image + manifests)');
  await switchToCoil(lab, kubeconfig, image);
  log(`coil: idle ${IDLE_S} s, then ${PODS} pods, then ${STATUS_RUNS} STATUS calls`);
  const coilIdle = await idleStatus(lab);
  const coil = await createToReady(lab, kubeconfig);
  const statusCpuMs = statusCallCpuMs(lab);
  return { pods: PODS, bridge: { ...summary(bridge), idle: bridgeIdle }, coil: { ...summary(coil), idle: coilIdle, statusCpuMs } };
}

async function measureGcpIpam(lab: Lab, kubeconfig: string, image: string): Promise<unknown> {
  log(`bridge + host-local: ${PODS} pods`);
  const bridge = await createToReady(lab, kubeconfig);
  const gce = started(await startGceEmulator(lab, root, Number(opt['op-ms'])));
  try {
    log(`switching the node to gcp-ipam (image + manifests; alias operations of ${opt['op-ms']} ms)`);
    await switchToGcpIpam(lab, kubeconfig, image, gce);
    const first = await createToReady(lab, kubeconfig);
    const second = await createToReady(lab, kubeconfig);
    const state = (await (await fetch(`${gce.url}/_emulator/state`)).json()) as { calls: Record<string, number> };
    return {
      pods: PODS,
      opMs: Number(opt['op-ms']),
      bridge: summary(bridge),
      gcpFirst: summary(first),
      gcpSecond: summary(second),
      updateCalls: state.calls['instances.updateNetworkInterface'] ?? 0,
    };
  } finally {
    await stopped(gce);
  }
}

/** The cloud a measure runs: its own finally stops it, and so does a signal's teardown (process.exit skips finally). */
const running = new Set<{ stop(): Promise<unknown> }>();
function started<T extends { stop(): Promise<unknown> }>(cloud: T): T {
  running.add(cloud);
  return cloud;
}
async function stopped(cloud: { stop(): Promise<unknown> }): Promise<void> {
  running.delete(cloud);
  await cloud.stop();
}

async function main(): Promise<void> {
  const image = buildImage(opt.family!);
  const stateDir = fs.mkdtempSync(path.join(os.tmpdir(), 'cnikit-podbench-'));
  const cluster = await startCluster({ stateDir, log, serviceAccounts: true });
  const teardown = async (): Promise<void> => {
    for (const cloud of running) await stopped(cloud).catch((err: unknown) => log(`stopping a cloud emulator: ${String(err)}`));
    await downNodes(labDirOf(stateDir), { log });
    await stopCluster(cluster);
  };
  // Ctrl-C (or the bench's timeout) still restores the host
  for (const sig of ['SIGINT', 'SIGTERM'] as const) process.once(sig, () => void teardown().finally(() => process.exit(130)));
  try {
    const lab = await upNodes({ clusterDir: stateDir, nodes: 1, cni: 'bridge', log });
    const measure = MEASURES[opt.family as keyof typeof MEASURES];
    console.log(JSON.stringify(await measure(lab, cluster.kubeconfig, image)));
  } finally {
    await teardown();
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exitCode = 1;
});
