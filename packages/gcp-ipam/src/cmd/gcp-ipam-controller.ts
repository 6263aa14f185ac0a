/**
 * gcp-ipam-controller: keeps every IPPool's status (capacity, allocated, available) current from a watch of the
 * IPAllocations, under Lease leader election (run it as a Deployment; two replicas are safe).
 *   gcp-ipam-controller [--kubeconfig f] [--metrics-addr :9486] [--health-addr :9487] [--resync 60]
 *     [--debounce-ms 500] [--leader-election-namespace $POD_NAMESPACE] [--leader-election-id gcp-ipam-controller]
 * Exit 1 with the reason on stderr (bad flag or kubeconfig, lost leadership); 0 after SIGTERM/SIGINT.
 */
import { parseArgs } from 'node:util';
import * as fs from 'node:fs';
import { ApiError, KubeConfigError, KubeMetrics, connect, parseListenAddr } from '@cnikit/kube';
import { DEFAULT_DEBOUNCE_MS, DEFAULT_RESYNC_MS, PoolStatusDaemon } from '../controller';

const USAGE = `usage: gcp-ipam-controller [flags]
  --kubeconfig <path>                 kubeconfig (default: $KUBECONFIG, else the in-cluster service account)
  --metrics-addr <[host]:port>        Prometheus /metrics (default :9486)
  --health-addr <[host]:port>         /healthz /readyz (default :9487)
  --resync <seconds>                  check every pool again this often (default ${DEFAULT_RESYNC_MS / 1000})
  --debounce-ms <ms>                  quiet time after a change before a pool's status is written (default ${DEFAULT_DEBOUNCE_MS})
  --leader-election-namespace <ns>    namespace of the Lease (default $POD_NAMESPACE, else kube-system)
  --leader-election-id <name>         name of the Lease (default gcp-ipam-controller)
`;

const SERVICE_ACCOUNT_TOKEN = '/var/run/secrets/kubernetes.io/serviceaccount/token';

/** --kubeconfig, else $KUBECONFIG, else the in-cluster service account; never client-node's localhost:8080 fallback. */
function kubeconfigPath(flag: string | undefined): string | undefined {
  const file = flag || process.env.KUBECONFIG || undefined;
  if (!file && !(process.env.KUBERNETES_SERVICE_HOST && fs.existsSync(SERVICE_ACCOUNT_TOKEN))) {
    throw new Error(`not in a cluster (no KUBERNETES_SERVICE_HOST or no ${SERVICE_ACCOUNT_TOKEN}): give --kubeconfig`);
  }
  return file;
}

/** Credentials the API server can never accept end the process; an unreachable server is waited for (the Lease loop retries). */
async function checkCredentials(transport: ReturnType<typeof connect>): Promise<void> {
  try {
    await transport.request('GET', '/version', { timeoutMs: 10_000 });
  } catch (err) {
    if (err instanceof KubeConfigError || (err instanceof ApiError && err.status === 401)) throw err;
  }
}

function positive(flag: string, v: string): number {
  const n = Number(v);
  if (v.trim() === '' || !Number.isFinite(n) || n <= 0) throw new Error(`--${flag}: expected a positive number, got ${JSON.stringify(v)}`);
  return n;
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      kubeconfig: { type: 'string' },
      'metrics-addr': { type: 'string', default: ':9486' },
      'health-addr': { type: 'string', default: ':9487' },
      resync: { type: 'string', default: String(DEFAULT_RESYNC_MS / 1000) },
      'debounce-ms': { type: 'string', default: String(DEFAULT_DEBOUNCE_MS) },
      'leader-election-namespace': { type: 'string', default: process.env.POD_NAMESPACE || 'kube-system' },
      'leader-election-id': { type: 'string', default: 'gcp-ipam-controller' },
      help: { type: 'boolean', short: 'h', default: false },
    },
  });
  if (values.help) {
    process.stdout.write(USAGE);
    return;
  }
  const metricsAddr = parseListenAddr(values['metrics-addr']!, '--metrics-addr');
  const healthAddr = parseListenAddr(values['health-addr']!, '--health-addr');
  const resyncMs = positive('resync', values.resync!) * 1000;
  const debounceMs = positive('debounce-ms', values['debounce-ms']!);
  const kubeMetrics = new KubeMetrics({ processMetrics: true });
  const kubeconfig = kubeconfigPath(values.kubeconfig);
  let transport: ReturnType<typeof connect>;
  try {
    transport = connect({ kubeconfig, observer: kubeMetrics.observeRequests() });
  } catch (err) {
    throw new Error(`kubeconfig ${kubeconfig ?? '(in-cluster)'}: ${(err as Error).message}`, { cause: err });
  }
  await checkCredentials(transport);
  const fatal = (why: string): never => {
    process.stderr.write(`gcp-ipam-controller: ${why}\n`);
    process.exit(1);
  };
  const daemon = new PoolStatusDaemon({
    transport,
    kubeMetrics,
    resyncMs,
    debounceMs,
    leaseNamespace: values['leader-election-namespace']!,
    leaseName: values['leader-election-id']!,
    metricsAddr,
    healthAddr,
    onFatal: fatal,
  });
  await daemon.start();
  const shutdown = (): void => {
    void daemon
      .stop()
      .catch(() => undefined)
      .finally(() => {
        transport.close();
        process.exit(0);
      });
  };
  process.once('SIGTERM', shutdown);
  process.once('SIGINT', shutdown);
}

main().catch((err: Error & { code?: string }) => {
  const usage = err.message.startsWith('--') || String(err.code).startsWith('ERR_PARSE_ARGS');
  process.stderr.write(`gcp-ipam-controller: ${err.message}\n${usage ? '(see gcp-ipam-controller --help)\n' : ''}`);
  process.exit(1);
});
