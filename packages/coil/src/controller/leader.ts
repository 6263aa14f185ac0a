/**
 * Runs Coil's controllers only while this process holds the Lease (@cnikit/kube's LeaderRunner, with
 * controller-runtime's manager semantics): coil-ipam-controller and coil-egress-controller both use it.
 * Losing the lease otherwise than through stop() ends the process (exit 1, the Pod restarts, as with
 * controller-runtime), so two leaders never write the same objects; SIGTERM releases the lease so a standby
 * takes over within about one retry period.
 */
import { LeaderRunner, leaderElectionHealthy, leaderIdentity, type KubeMetrics, type KubeTransport, type Startable } from '@cnikit/kube';
import type { Registry } from '@cnikit/kube/prom';
import { serveEndpoints, shutdownOnSignal } from '../program';
import type { IpamController } from './ipam-controller';

/** The IPAM controllers plus one dangling-block GC as soon as this process leads (then every gc interval). */
export function ipamLeaderTask(ctl: IpamController): Startable {
  return {
    start: async () => {
      await ctl.start();
      await ctl.gcDangling();
    },
    stop: () => ctl.stop(),
  };
}

export interface ServeOptions {
  /** Program name for messages (`coil-ipam-controller`). */
  program: string;
  task: Startable;
  /** Informers synced (ready while leading). */
  synced(): boolean;
  transport: KubeTransport;
  registry: Registry;
  kubeMetrics: KubeMetrics;
  /** The Lease (flags --leader-election-namespace, --leader-election-id). */
  leaderElectionNamespace: string;
  leaderElectionId: string;
  metricsAddr: string;
  healthAddr: string;
}

/**
 * The main loop both controllers share: campaign for the Lease, serve metrics and health (liveness follows
 * the elector, readiness the informers while leading), exit 1 when leadership is lost or the controller
 * fails to start, release the Lease on SIGTERM/SIGINT.
 */
export async function serveLeaderElected(o: ServeOptions): Promise<void> {
  const fatal = (what: string): never => {
    process.stderr.write(`${o.program}: ${what}\n`);
    process.exit(1);
  };
  const runner = new LeaderRunner(o.task, {
    transport: o.transport,
    namespace: o.leaderElectionNamespace,
    name: o.leaderElectionId,
    identity: leaderIdentity(),
    metrics: o.kubeMetrics,
    onLost: () => fatal('lost leadership'),
    onStartFailed: (err) => fatal(`start failed: ${(err as Error).message}`),
  });
  const endpoints = await serveEndpoints(o, (probes) =>
    probes
      .addHealthCheck('leader-election', leaderElectionHealthy(runner.elector))
      .addReadyCheck('informers', () => !runner.isLeader() || o.synced()),
  );
  shutdownOnSignal(() => runner.stop(), endpoints);
  await runner.run();
}
