/**
 * coil-ipam-controller: carves address blocks for BlockRequests, guards pool deletion, collects blocks of
 * deleted nodes. Runs under Lease leader election; health on :9387, metrics on :9386.
 */
import { connectWithMetrics, programCommand, programMain } from '../program';
import { parseDuration } from '../util';
import { IpamController } from '../controller/ipam-controller';
import { ipamLeaderTask, serveLeaderElected } from '../controller/leader';

async function main(): Promise<void> {
  const cmd = programCommand('coil-ipam-controller', { metrics: 9386, health: 9387 })
    .option('--webhook-addr <addr>', 'accepted for compatibility: validation is CEL in the CRDs', ':9443')
    .option('--gc-interval <duration>', 'interval of the dangling AddressBlock GC', '1h')
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
  const c = connectWithMetrics(o.kubeconfig);
  const ctl = new IpamController({ transport: c.transport, registry: c.registry, gcIntervalMs: parseDuration(o.gcInterval) });
  await serveLeaderElected({ program: 'coil-ipam-controller', task: ipamLeaderTask(ctl), synced: () => ctl.synced(), ...c, ...o });
}

programMain('coil-ipam-controller', main);
