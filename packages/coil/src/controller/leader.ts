/**
 * coil-ipam-controller under Lease leader election: the controllers (and the dangling-block GC) run only
 * while this process leads. Losing the lease is fatal (onLost: the process exits and is restarted, as
 * controller-runtime does), so two leaders never carve blocks at the same time; stop() releases the lease
 * so a standby takes over within one retry period.
 */
import { LeaderElector, type KubeMetrics, type KubeTransport } from '@cnikit/kube';
import type { IpamController } from './ipam-controller';

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
  /** The controllers failed to start. */
  onStartFailed(err: unknown): void;
}

export class LeaderRunner {
  readonly elector: LeaderElector;
  private stopping = false;
  private started: Promise<void> | undefined;

  constructor(private readonly ctl: IpamController, opts: LeaderOptions) {
    this.elector = new LeaderElector({
      transport: opts.transport, namespace: opts.namespace, name: opts.name, identity: opts.identity, metrics: opts.metrics,
      leaseDurationMs: opts.leaseDurationMs, renewDeadlineMs: opts.renewDeadlineMs, retryPeriodMs: opts.retryPeriodMs,
      onStartedLeading: () => {
        this.started = ctl.start().then(async () => {
          await ctl.gcDangling();
        });
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
    await this.ctl.stop();
  }
}
