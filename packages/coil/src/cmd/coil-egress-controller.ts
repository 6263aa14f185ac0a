/**
 * coil-egress-controller: makes a Deployment, a Service and (optionally) a PodDisruptionBudget for every
 * Egress. Runs under Lease leader election; metrics on :9396, health on :9397.
 */
import { connectWithMetrics, programCommand, programMain } from '../program';
import { EgressController } from '../egress-controller/egress-controller';
import { serveLeaderElected } from '../controller/leader';

async function main(): Promise<void> {
  const port = (v: string): number => {
    const n = Number(v);
    if (!Number.isInteger(n) || n < 1 || n > 65535) throw new Error(`--egress-port: not a port number: ${JSON.stringify(v)}`);
    return n;
  };
  const o = programCommand('coil-egress-controller', { metrics: 9396, health: 9397 })
    .option('--webhook-addr <addr>', 'accepted for compatibility: validation is CEL in the CRD', ':9444')
    .option('--egress-port <n>', 'UDP port of the FoU tunnels (coil-egress --fou-port and the Service port)', port, 5555)
    .option('--egress-image <image>', 'image of the egress container (default $COIL_EGRESS_IMAGE)')
    .option('--leader-election-namespace <ns>', 'namespace of the leader election Lease', process.env.POD_NAMESPACE ?? 'kube-system')
    .option('--leader-election-id <name>', 'name of the leader election Lease', 'coil-egress-leader')
    .parse()
    .opts<{
      metricsAddr: string;
      healthAddr: string;
      egressPort: number;
      egressImage?: string;
      kubeconfig?: string;
      leaderElectionNamespace: string;
      leaderElectionId: string;
    }>();
  const image = o.egressImage ?? process.env.COIL_EGRESS_IMAGE;
  if (!image) throw new Error('the egress image is required: --egress-image or $COIL_EGRESS_IMAGE');
  const c = connectWithMetrics(o.kubeconfig);
  const ctl = new EgressController({ transport: c.transport, metrics: c.kubeMetrics, image, fouPort: o.egressPort });
  await serveLeaderElected({ program: 'coil-egress-controller', task: ctl, synced: () => ctl.synced(), ...c, ...o });
}

programMain('coil-egress-controller', main);
