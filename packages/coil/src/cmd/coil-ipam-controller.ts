/**
 * coil-ipam-controller: carves address blocks for BlockRequests, guards pool deletion, collects blocks of
 * deleted nodes. Runs under Lease leader election; health on :9387, metrics on :9386.
 */
import { Command } from 'commander';
import { KubeMetrics, connect } from '@cnikit/kube';
import { Registry } from 'prom-client';
import { parseDuration } from '../util';
import { IpamController } from '../controller/ipam-controller';
import { ipamLeaderTask, serveLeaderElected } from '../controller/leader';

async function main(): Promise<void> {
  const cmd = new Command('coil-ipam-controller')
    .option('--metrics-addr <addr>', 'bind address of the metrics endpoint', ':9386')
    .option('--health-addr <addr>', 'bind address of the health/readiness probes', ':9387')
    .option('--webhook-addr <addr>', 'accepted for compatibility: validation is CEL in the CRDs', ':9443')
    .option('--gc-interval <duration>', 'interval of the dangling AddressBlock GC', '1h')
    .option('--kubeconfig <path>', 'kubeconfig (default: in-cluster / $KUBECONFIG)')
    .option('--leader-election-namespace <ns>', 'namespace of the leader election Lease', process.env.POD_NAMESPACE ?? 'kube-system')
    .option('--leader-election-id <name>', 'name of the leader election Lease', 'coil-leader')
    .parse();
  const o = cmd.opts<{
    metricsAddr: string;
    healthAddr: string;
    gcInterval: string;
    kubeconfig?: string;
    leaderElectionNamespace: string;
    leaderElectionId: string;
  }>();
  const registry = new Registry();
  const kubeMetrics = new KubeMetrics({ registry, processMetrics: true });
  const transport = connect({ kubeconfig: o.kubeconfig, observer: kubeMetrics.observeRequests() });
  const ctl = new IpamController({ transport, registry, gcIntervalMs: parseDuration(o.gcInterval) });
  await serveLeaderElected({
    program: 'coil-ipam-controller',
    task: ipamLeaderTask(ctl),
    synced: () => ctl.synced(),
    transport,
    registry,
    metrics: kubeMetrics,
    leaseNamespace: o.leaderElectionNamespace,
    leaseName: o.leaderElectionId,
    metricsAddr: o.metricsAddr,
    healthAddr: o.healthAddr,
  });
}

main().catch((err: unknown) => {
  process.stderr.write(`coil-ipam-controller: ${(err as Error).stack ?? String(err)}\n`);
  process.exit(1);
});
