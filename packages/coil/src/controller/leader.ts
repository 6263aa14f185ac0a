/**
 * Runs a controller only while this process holds the Lease (controller-runtime's manager semantics):
 * coil-ipam-controller and coil-egress-controller both use it. Losing the lease otherwise than through
 * stop() is reported through onLost (main exits and the Pod restarts, as controller-runtime does), so two
 * leaders never write the same objects; stop() releases the lease so a standby takes over within about
 * one retry period.
 */
import { LeaderElector, leaderElectionHealthy, leaderIdentity, type KubeMetrics, type KubeTransport } from '@cnikit/kube';
import type { Registry } from 'prom-client';
import { serveEndpoints, shutdownOnSignal } from '../program';
import type { IpamController } from './ipam-controller';

/** What runs while leading. */
export interface Startable {
  start(): Promise<void>;
  stop(): Promise<void>;
}

export interface LeaderOptions {
  transport: KubeTransport;
  namespace: string;
  name: string;
  identity: string;
  metrics?: KubeMetrics;
  leaseDurationMs?: number;
  renewDeadlineMs?: number;
  retryPeriodMs?: number;
  /** Leadership lost while running (not through stop()). */
  onLost(): void;
  /** The controller failed to start. */
  onStartFailed(err: unknown): void;
}

export class LeaderRunner {
  readonly elector: LeaderElector;
  private stopping = false;
  private started: Promise<void> | undefined;

  constructor(
    private readonly ctl: Startable,
    opts: LeaderOptions,
  ) {
    this.elector = new LeaderElector({
      transport: opts.transport,
      namespace: opts.namespace,
      name: opts.name,
      identity: opts.identity,
      metrics: opts.metrics,
      leaseDurationMs: opts.leaseDurationMs,
      renewDeadlineMs: opts.renewDeadlineMs,
      retryPeriodMs: opts.retryPeriodMs,
      onStartedLeading: () => {
        this.started = ctl.start();
        this.started.catch((err: unknown) => opts.onStartFailed(err));
      },
      onStoppedLeading: () => {
        if (!this.stopping) opts.onLost();
      },
    });
  }

  /** Campaigns; resolves when leadership ends or stop() is called. */
  run(): Promise<void> {
    return this.elector.run();
  }

  isLeader(): boolean {
    return this.elector.isLeader();
  }

  async stop(): Promise<void> {
    this.stopping = true;
    await this.elector.stop();
    await this.started?.catch(() => undefined);
    if (this.started) await this.ctl.stop();
  }
}

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
