/**
 * doctor: explains a node's pod networking (docs/doctor.md). `doctor conf` lints the CNI conf dir as the
 * runtime will read it, and Multus's NetworkAttachmentDefinitions as Multus will run them on this node: exit 0
 * when nothing will fail, 1 when something will. `doctor node` joins the runtime's sandboxes with what pod
 * networking holds on the node: exit 0 when every attachment is healthy, 1 when one is leaked, broken or
 * conflicting, 2 when a source cannot be read. `doctor node --gc [--apply]` reclaims what sandboxes the runtime
 * no longer knows left (node/gc.ts). `doctor pod NAMESPACE/NAME` says why a pod has no network (pod.ts).
 * `doctor serve` exposes the node's pod networking as Prometheus metrics (serve.ts). `doctor cluster` reads what
 * no node sees alone: Coil's blocks whose node is gone, address conflicts between live pods (cluster.ts).
 */
import { Command, Option } from 'commander';
import { clusterHealthy, formatCluster, judgeCluster } from '../cluster';
import { deleteBlocks, readCluster } from '../cluster-api';
import { formatReports, hasErrors, lintConfDir, lintNads, type FileReport } from '../conf';
import { listNads } from '../nads';
import { formatGc, gcNode } from '../node/gc';
import { formatNode, joinNode } from '../node/join';
import { readNode, CILIUM_SOCKET, GCP_IPAM_STATE, TERWAY_STATE, type SourceOptions } from '../node/sources';
import { diagnose, formatPod, networkStatus, podSandboxes } from '../pod';
import { readPod } from '../pod-api';
import { serve } from '../serve';

/** The flags withNodeSources, withConfDir and withBinDir declare. */
interface NodeSourceFlags {
  criSocket: string;
  cacheDir: string;
  hostLocalDir: string;
  terwayState: string;
  gcpState: string;
  ciliumSocket: string;
  cloud: boolean;
  ec2Endpoint?: string;
  region: string;
  aliyunMetadata: string;
  aliyunEndpoint?: string;
}
interface DirFlags {
  confDir: string;
  binDir: string;
}

interface ConfOptions extends DirFlags {
  output: string;
  nads: boolean;
  kubeconfig?: string;
}

/** NADs are read when an API server is configured: --kubeconfig, $KUBECONFIG, or in a pod (in-cluster). */
async function nadReports(o: ConfOptions, binDirs: string[]): Promise<{ reports: FileReport[]; note?: string }> {
  if (!o.nads) return { reports: [], note: 'not checked (--no-nads)' };
  if (!o.kubeconfig && !process.env.KUBECONFIG && !process.env.KUBERNETES_SERVICE_HOST) {
    return { reports: [], note: 'not checked (no --kubeconfig, KUBECONFIG or in-cluster config)' };
  }
  const nads = await listNads(o.kubeconfig);
  if (!nads) return { reports: [], note: 'none: the cluster has no NetworkAttachmentDefinition CRD (no Multus)' };
  return { reports: await lintNads(nads, binDirs), note: nads.length ? undefined : 'none in the cluster' };
}

// bad usage (an unknown option, an --output that is not table or json) exits 2, as the docs say; --help 0
const program = new Command('doctor')
  .description("explain a node's pod networking")
  .exitOverride((err) => process.exit(err.exitCode === 0 ? 0 : 2));
const outputOption = (): Option => new Option('-o, --output <format>', 'table or json').choices(['table', 'json']).default('table');

/** Where the node's state is read: the runtime's socket, libcni's caches, host-local's leases (node, pod, serve). */
const withNodeSources = (c: Command): Command =>
  c
    .option(
      '--cri-socket <path>',
      "the runtime's CRI socket (containerd's: its sandbox store is read there too)",
      '/run/containerd/containerd.sock',
    )
    .option('--cache-dir <dirs>', "libcni cache dirs, colon-separated (the runtime's, Multus's)", '/var/lib/cni:/var/lib/cni/multus')
    .option('--host-local-dir <dir>', "host-local's data dir", '/var/lib/cni/networks')
    .option('--terway-state <file>', "terwayd's lease store (its --state)", TERWAY_STATE)
    .option('--gcp-state <dir>', "gcp-ipam's state dir (its ipam.stateDir)", GCP_IPAM_STATE)
    .option('--cilium-socket <path>', "cilium-eni-agent's socket (its --socket), asked for the IPs it handed out", CILIUM_SOCKET)
    .option(
      '--cloud',
      "also ask the cloud of the node's cloud IPAM (gcp-ipam: the VM's aliases; cilium-eni-ipam and terway: their ENIs' addresses); costs API quota",
      false,
    )
    .option('--ec2-endpoint <url>', "EC2 endpoint for --cloud (moto, a proxy); default: the region's")
    .option('--region <region>', 'AWS region for --cloud', process.env.AWS_REGION ?? 'us-east-1')
    .option('--aliyun-metadata <url>', "Alibaba Cloud's instance metadata service for --cloud (terway)", 'http://100.100.100.200')
    .option('--aliyun-endpoint <host[:port]|url>', "ECS endpoint for --cloud (terway); default: the region's");

/** Where the runtime finds network configs and plugins (conf, pod, serve; node --gc needs the bin dirs only). */
const withConfDir = (c: Command): Command => c.option('--conf-dir <dir>', 'the CNI conf dir', '/etc/cni/net.d');
const withBinDir = (c: Command): Command => c.option('--bin-dir <dirs>', 'the CNI bin dirs, colon-separated', '/opt/cni/bin');

withBinDir(withConfDir(program.command('conf')))
  .description(
    "lint the node's CNI network configs and Multus's NetworkAttachmentDefinitions: each plugin found and asked VERSION as the runtime asks it",
  )
  .option('--kubeconfig <file>', 'read NetworkAttachmentDefinitions with this kubeconfig (default: $KUBECONFIG or in-cluster)')
  .option('--no-nads', 'do not read NetworkAttachmentDefinitions')
  .addOption(outputOption())
  .action(async (o: ConfOptions) => {
    const binDirs = o.binDir.split(':').filter(Boolean);
    const files = await lintConfDir({ confDir: o.confDir, binDirs });
    const nads = await nadReports(o, binDirs);
    if (o.output === 'json') {
      process.stdout.write(`${JSON.stringify({ confDir: o.confDir, files, nads: nads.reports, nadsNote: nads.note }, null, 2)}\n`);
    } else {
      process.stdout.write(formatReports(files, o.confDir));
      process.stdout.write(
        nads.note ? `NetworkAttachmentDefinitions: ${nads.note}\n` : formatReports(nads.reports, 'NetworkAttachmentDefinitions'),
      );
    }
    process.exitCode = hasErrors(files) || nads.reports.some((r) => r.findings.some((f) => f.severity === 'error')) ? 1 : 0;
  });

interface NodeOptions extends NodeSourceFlags, Pick<DirFlags, 'binDir'> {
  gc: boolean;
  apply: boolean;
  output: string;
}

function sourceOptions(o: NodeSourceFlags): SourceOptions {
  return {
    criSocket: o.criSocket,
    cacheDirs: o.cacheDir.split(':').filter(Boolean),
    hostLocalDir: o.hostLocalDir,
    terwayState: o.terwayState,
    gcpState: o.gcpState,
    ciliumSocket: o.ciliumSocket,
    cloud: o.cloud,
    ec2Endpoint: o.ec2Endpoint,
    region: o.region,
    aliyunMetadata: o.aliyunMetadata,
    aliyunEndpoint: o.aliyunEndpoint,
  };
}

async function reportNode(o: NodeOptions): Promise<void> {
  const { sources, unreadable } = await readNode(sourceOptions(o));
  const rows = joinNode(sources);
  if (o.output === 'json') process.stdout.write(`${JSON.stringify({ attachments: rows, unreadable }, null, 2)}\n`);
  else {
    process.stdout.write(formatNode(rows));
    for (const f of unreadable) process.stdout.write(`unreadable: ${f}\n`);
  }
  process.exitCode = rows.every((r) => r.state === 'healthy') ? 0 : 1;
}

/** Dry run: exit 0 when nothing is to be reclaimed, 1 otherwise. --apply: 0 when every step worked and nothing is left. */
async function reclaimNode(o: NodeOptions): Promise<void> {
  const report = await gcNode({ ...sourceOptions(o), binDirs: o.binDir.split(':').filter(Boolean), apply: o.apply });
  process.stdout.write(o.output === 'json' ? `${JSON.stringify(report, null, 2)}\n` : formatGc(report));
  const clean = report.applied ? report.after.length === 0 && report.steps.every((s) => s.ok) : report.before.length === 0;
  process.exitCode = clean ? 0 : 1;
}

withBinDir(withNodeSources(program.command('node')))
  .description(
    "join the runtime's sandboxes with the node's CNI result caches, host-local leases and host veths: each attachment healthy, leaked, broken or conflicting",
  )
  .option(
    '--gc',
    'reclaim what sandboxes the runtime no longer knows left: DEL of cached attachments, GC, host-local release (a dry run without --apply)',
  )
  .option('--apply', 'with --gc: do it')
  .addOption(outputOption())
  .action(async (o: NodeOptions) => {
    if (o.apply && !o.gc) program.error('doctor: --apply goes with --gc', { exitCode: 2 });
    await (o.gc ? reclaimNode(o) : reportNode(o));
  });

interface PodOptions extends NodeSourceFlags, DirFlags {
  kubeconfig?: string;
  output: string;
}

/** Exit 0 when the pod has its network, 1 when not (the verdict says why), 2 on bad usage or an unreadable source. */
async function explainPod(ref: string, o: PodOptions): Promise<void> {
  const [namespace, name] = ref.includes('/') ? ref.split('/', 2) : ['default', ref];
  if (!namespace || !name) program.error(`doctor: pod ${ref}: NAMESPACE/NAME expected`, { exitCode: 2 });
  const { pod, events } = await readPod(namespace!, name!, o.kubeconfig);
  const status = await networkStatus(o.confDir, o.binDir.split(':').filter(Boolean));
  const sandboxes = pod ? await podSandboxes(pod, sourceOptions(o)) : [];
  const evidence = { pod, events, status, sandboxes };
  const d = diagnose(evidence);
  process.stdout.write(
    o.output === 'json' ? `${JSON.stringify({ ...d, ...evidence }, null, 2)}\n` : formatPod(`${namespace}/${name}`, evidence, d),
  );
  process.exitCode = d.ok ? 0 : 1;
}

withBinDir(withConfDir(withNodeSources(program.command('pod'))))
  .argument('<pod>', 'NAMESPACE/NAME (or NAME in default)')
  .description("why a pod has no network, in one line, with the evidence: its events, STATUS of the node's network, its sandboxes here")
  .option('--kubeconfig <file>', 'the API server (default: $KUBECONFIG or in-cluster)')
  .addOption(outputOption())
  .action(explainPod);

interface ClusterOptions {
  kubeconfig?: string;
  gc: boolean;
  apply: boolean;
  output: string;
}

/**
 * Exit 0 when no block or allocation is leaked and no address conflicts, 1 otherwise; with --gc --apply, 0 when every leaked
 * block went and nothing is left.
 */
async function explainCluster(o: ClusterOptions): Promise<void> {
  if (o.apply && !o.gc) program.error('doctor: --apply goes with --gc', { exitCode: 2 });
  const apply = !!o.apply;
  const report = judgeCluster(await readCluster(o.kubeconfig));
  if (!o.gc) {
    process.stdout.write(o.output === 'json' ? `${JSON.stringify(report, null, 2)}\n` : formatCluster(report));
    process.exitCode = clusterHealthy(report) ? 0 : 1;
    return;
  }
  const steps = apply
    ? await deleteBlocks(
        report.leakedBlocks.map((b) => b.name),
        o.kubeconfig,
      )
    : [];
  const after = apply ? judgeCluster(await readCluster(o.kubeconfig)) : undefined;
  const plan = report.leakedBlocks.map((b) => `delete block ${b.name} (node ${b.node} is gone)`);
  if (o.output === 'json') process.stdout.write(`${JSON.stringify({ applied: apply, before: report, steps, after }, null, 2)}\n`);
  else {
    const done = (i: number): string => (apply ? (steps[i]!.ok ? ' ok' : ` FAILED: ${steps[i]!.error}`) : '');
    process.stdout.write(plan.map((p, i) => `${apply ? '' : 'would '}${p}${done(i)}\n`).join('') || 'nothing to reclaim\n');
    if (after) process.stdout.write(formatCluster(after));
  }
  process.exitCode = (after ? clusterHealthy(after) && steps.every((x) => x.ok) : report.leakedBlocks.length === 0) ? 0 : 1;
}

program
  .command('cluster')
  .description(
    "what no node sees alone: Coil's blocks whose node is gone, gcp-ipam's allocations whose pod is gone, each pool's blocks in use, an address held by two live pods; --gc deletes the leaked blocks",
  )
  .option('--kubeconfig <file>', 'the API server (default: $KUBECONFIG or in-cluster)')
  .option('--gc', "delete the blocks whose node is gone, as Coil's controller would (a dry run without --apply)")
  .option('--apply', 'with --gc: do it')
  .addOption(outputOption())
  .action(explainCluster);

interface ServeCliOptions extends NodeSourceFlags, DirFlags {
  listen: string;
  interval: string;
  gc: boolean;
}

withBinDir(withConfDir(withNodeSources(program.command('serve'))))
  .description(
    "the node's pod networking as Prometheus metrics: attachments by state and plugin, leaked objects, STATUS, our plugins' call latencies; --gc reclaims leaks each round",
  )
  .option('--listen <host:port>', 'where /metrics, /healthz and /readyz are served', '0.0.0.0:9402')
  .option('--interval <seconds>', 'seconds between rounds', '30')
  .option('--gc', 'each round, reclaim what gone sandboxes left (doctor node --gc --apply)')
  .action(async (o: ServeCliOptions) => {
    const at = o.listen.lastIndexOf(':');
    const port = Number(o.listen.slice(at + 1));
    const seconds = Number(o.interval);
    if (at < 0 || !Number.isInteger(port) || !(seconds > 0))
      program.error('doctor: serve: --listen host:port and --interval seconds > 0', { exitCode: 2 });
    await serve({
      ...sourceOptions(o),
      confDir: o.confDir,
      binDirs: o.binDir.split(':').filter(Boolean),
      gc: !!o.gc,
      host: o.listen.slice(0, at) || '0.0.0.0',
      port,
      intervalMs: seconds * 1000,
    });
  });

program.parseAsync().catch((err: unknown) => {
  process.stderr.write(`doctor: ${(err as Error).message}\n`);
  process.exitCode = 2;
});
