/**
 * coil-egress: runs in each router pod of an Egress (the Deployment coil-egress-controller
 * creates). Keeps a FoU tunnel to every client pod, SNATs what leaves eth0, exports conntrack
 * metrics on :8080 and /healthz /readyz on :8081.
 * Env: COIL_POD_NAMESPACE, COIL_POD_NAME, COIL_EGRESS_NAME, COIL_POD_ADDRESSES (comma-separated).
 */
import { hostNetns, openNetns } from '@cnikit/netlib';
import { connectWithMetrics, programCommand, programMain, serveEndpoints, shutdownOnSignal, startWithRetries } from '../program';
import { parsePodAddresses } from '../egress/clients';
import { DEFAULT_FOU_PORT } from '../egress/constants';
import { RouterDaemon } from '../egress/daemon';
import { registerEgressMetrics } from '../egress/metrics';
import { NAT_BACKENDS, type NatBackend } from '../egress/snat';

function env(name: string): string {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is required (set by the Deployment coil-egress-controller creates)`);
  return v;
}

function log(level: string, msg: string, fields: Record<string, unknown> = {}): void {
  process.stderr.write(`${JSON.stringify({ time: new Date().toISOString(), level, msg, ...fields })}\n`);
}

async function main(): Promise<void> {
  const port = (v: string): number => {
    const n = Number(v);
    if (!Number.isInteger(n) || n < 1 || n > 65535) throw new Error(`not a port number: ${v}`);
    return n;
  };
  const o = programCommand('coil-egress', { metrics: 8080, health: 8081 })
    .option('--fou-port <n>', 'FoU port number', port, DEFAULT_FOU_PORT)
    .option('--backend <name>', `NAT backend: ${NAT_BACKENDS.join(' | ')}`, 'iptables')
    .option('--uplink <name>', 'interface whose outgoing traffic is masqueraded', 'eth0')
    .option('--netns <path>', "work in this network namespace instead of the process's own (tests)")
    .parse()
    .opts<{
      metricsAddr: string;
      healthAddr: string;
      fouPort: number;
      backend: string;
      uplink: string;
      kubeconfig?: string;
      netns?: string;
    }>();
  if (!NAT_BACKENDS.includes(o.backend as NatBackend))
    throw new Error(`--backend: expected ${NAT_BACKENDS.join(' or ')}, got ${JSON.stringify(o.backend)}`);
  const namespace = env('COIL_POD_NAMESPACE');
  const podName = env('COIL_POD_NAME');
  const egressName = env('COIL_EGRESS_NAME');
  const addrs = parsePodAddresses(env('COIL_POD_ADDRESSES'));

  const { registry, transport } = connectWithMetrics(o.kubeconfig);
  const daemon = new RouterDaemon({
    transport,
    ns: o.netns ? openNetns(o.netns) : hostNetns(),
    namespace,
    podName,
    egressName,
    ...addrs,
    fouPort: o.fouPort,
    backend: o.backend as NatBackend,
    uplink: o.uplink,
    log,
  });
  registerEgressMetrics({ registry, namespace, pod: podName, egress: egressName, clients: () => daemon.clientCount });

  const endpoints = await serveEndpoints({ ...o, registry }, (probes) => probes.addReadyCheck('tunnels', () => daemon.isReady()));
  // Start-up lists from the API server.
  await startWithRetries(
    () => daemon.start(),
    async (attempt, err) => log('warn', 'start-up failed, retrying', { attempt, error: err.message }),
  );
  log('info', 'coil-egress started', { namespace, pod: podName, egress: egressName, ...addrs, fouPort: o.fouPort, backend: o.backend });
  shutdownOnSignal(() => daemon.stop(), endpoints);
}

programMain('coil-egress', main);
