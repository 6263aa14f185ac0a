/**
 * Lease-based leader election on coordination.k8s.io/v1, following client-go's leaderelection package:
 *
 * - Candidates read the Lease every retry period. A lease held by someone else is valid until
 *   `leaseDurationSeconds` after this candidate *observed* its last change, measured on the candidate's own
 *   monotonic clock, so clock skew between machines does not matter. A candidate wakes up right when that
 *   time comes and takes the lease with an optimistic-concurrency update (the Lease's resourceVersion): of
 *   several candidates only one write wins. After a leader dies, a successor therefore leads within one lease
 *   duration of the last renewal it observed: at most lease duration + one retry period after the death.
 * - The leader renews every retry period. If no renewal has succeeded for `renewDeadline` (< lease duration)
 *   it stops leading on its own, before any other candidate can consider the lease expired: there are never
 *   two leaders, even when the leader is cut off from the API server.
 * - On stop (with releaseOnCancel, the default) the leader first stops leading, then clears holderIdentity so
 *   a successor takes over within one retry period instead of waiting out the lease.
 *
 * - LeaderRunner runs a task (a controller) only while leading, as controller-runtime's manager does.
 *
 * Defaults are client-go's / controller-runtime's: lease 15 s, renew deadline 10 s, retry period 2 s.
 */
import { randomUUID } from 'node:crypto';
import { hostname } from 'node:os';
import { performance } from 'node:perf_hooks';
import { ResourceClient } from './client';
import { KubeConfigError, isAlreadyExists, isConflict, isNotFound } from './errors';
import { traceLogger, type Logger } from './log';
import type { KubeMetrics } from './metrics';
import { Leases, type Lease } from './resource';
import { sleep } from './retry';
import type { KubeTransport } from './transport';

/**
 * A candidate's identity as client-go's users make it: the hostname and a random UUID. Hostname and pid are not
 * unique: a container's process is pid 1, and host-network replicas on one node share its hostname, so two
 * replicas would both hold the Lease (seen: Coil's controller carving two blocks for one BlockRequest).
 */
export const leaderIdentity = (): string => `${hostname()}_${randomUUID()}`;

export interface LeaderElectionOptions {
  transport: KubeTransport;
  namespace: string;
  /** Lease name. */
  name: string;
  /** This candidate's identity, unique per process: leaderIdentity(). */
  identity: string;
  leaseDurationMs?: number;
  renewDeadlineMs?: number;
  retryPeriodMs?: number;
  /** Clear the lease on stop() so a successor need not wait for it to expire. Default true. */
  releaseOnCancel?: boolean;
  /** Called once leadership is acquired; `signal` aborts when leadership ends. */
  onStartedLeading?(signal: AbortSignal): void | Promise<void>;
  /** Called once when leadership ends (lost, or stop()). */
  onStoppedLeading?(): void;
  /** Called whenever the observed holder changes (including to this identity). */
  onNewLeader?(identity: string): void;
  metrics?: KubeMetrics;
  logger?: Logger;
}

export const DEFAULT_LEASE_DURATION_MS = 15_000;
export const DEFAULT_RENEW_DEADLINE_MS = 10_000;
export const DEFAULT_RETRY_PERIOD_MS = 2_000;
/** Retry periods are stretched by up to this fraction, at random, so candidates do not move in lockstep. */
const JITTER = 0.2;

/** Lease times are metav1.MicroTime: RFC 3339 with six fractional digits. */
export function microTime(d: Date = new Date()): string {
  return d.toISOString().replace(/\.(\d{3})Z$/, '.$1000Z');
}

type LeaseSpec = NonNullable<Lease['spec']>;

export class LeaderElector {
  readonly leaseDurationMs: number;
  readonly renewDeadlineMs: number;
  readonly retryPeriodMs: number;
  private readonly leases: ResourceClient<Lease>;
  private readonly log: Logger;
  private observed: LeaseSpec | undefined;
  private observedAt = 0;
  /** Monotonic time at which the lease another candidate holds expires, as this candidate observed it. */
  private foreignExpiry = 0;
  private observedHolder: string | undefined;
  private leading = false;
  private lastRenew = 0;
  private leadCtl: AbortController | undefined;
  private readonly stopCtl = new AbortController();
  private running: Promise<void> | undefined;

  constructor(private readonly opts: LeaderElectionOptions) {
    this.leaseDurationMs = opts.leaseDurationMs ?? DEFAULT_LEASE_DURATION_MS;
    this.renewDeadlineMs = opts.renewDeadlineMs ?? DEFAULT_RENEW_DEADLINE_MS;
    this.retryPeriodMs = opts.retryPeriodMs ?? DEFAULT_RETRY_PERIOD_MS;
    if (!(this.leaseDurationMs > this.renewDeadlineMs)) {
      throw new KubeConfigError(
        `leader election: leaseDuration (${this.leaseDurationMs} ms) must exceed renewDeadline (${this.renewDeadlineMs} ms)`,
      );
    }
    if (!(this.renewDeadlineMs > this.retryPeriodMs * (1 + JITTER))) {
      throw new KubeConfigError(
        `leader election: renewDeadline (${this.renewDeadlineMs} ms) must exceed retryPeriod*${1 + JITTER} (${this.retryPeriodMs} ms)`,
      );
    }
    if (this.leaseDurationMs % 1000 !== 0)
      throw new KubeConfigError(`leader election: leaseDuration must be whole seconds, got ${this.leaseDurationMs} ms`);
    if (!opts.identity) throw new KubeConfigError('leader election: identity is required');
    this.leases = new ResourceClient(opts.transport, Leases, { namespace: opts.namespace });
    this.log = opts.logger ?? traceLogger('kube.leader', { lease: `${opts.namespace}/${opts.name}`, identity: opts.identity });
  }

  get identity(): string {
    return this.opts.identity;
  }

  isLeader(): boolean {
    return this.leading;
  }

  /** The holder last observed in the Lease (may be this identity). */
  get leader(): string | undefined {
    return this.observedHolder;
  }

  /**
   * Campaigns until leadership is acquired, then renews until it is lost or stop() is called. Resolves when
   * leadership ends (or stop() is called before it was acquired). Call once.
   */
  run(): Promise<void> {
    this.running ??= this.loop();
    return this.running;
  }

  /** Stops campaigning/leading; with releaseOnCancel, releases a held lease. Resolves when done. */
  async stop(): Promise<void> {
    this.stopCtl.abort();
    await this.running;
  }

  /**
   * For /healthz (client-go's HealthzAdaptor): false while this process believes it leads but has not
   * renewed for longer than the lease duration plus tolerance, i.e. a stuck leader.
   */
  healthy(toleranceMs = 20_000): boolean {
    return !this.leading || performance.now() - this.lastRenew <= this.leaseDurationMs + toleranceMs;
  }

  private async loop(): Promise<void> {
    const stop = this.stopCtl.signal;
    // Campaign.
    for (;;) {
      if (stop.aborted) return;
      const started = performance.now();
      if (await this.tryAcquireOrRenew()) {
        this.lastRenew = started;
        break;
      }
      // Poll every retry period, but wake exactly when the current holder's lease expires (as observed here).
      const untilExpiry = this.foreignExpiry - performance.now();
      const wait = untilExpiry > 0 ? Math.min(this.jittered(), untilExpiry + 1) : this.jittered();
      await sleep(wait, stop).catch(() => undefined);
    }
    this.startLeading();
    // Renew.
    let watchdog = this.armWatchdog();
    try {
      while (this.leading && !stop.aborted) {
        await sleep(this.retryPeriodMs, stop).catch(() => undefined);
        if (!this.leading || stop.aborted) break;
        const started = performance.now();
        const ok = await this.tryAcquireOrRenew(this.lastRenew + this.renewDeadlineMs - started);
        if (!this.leading) break;
        if (ok) {
          this.lastRenew = started;
          clearTimeout(watchdog);
          watchdog = this.armWatchdog();
        } else if (this.foreignExpiry > 0) {
          // Someone else holds the lease now (this process was stalled past the lease): stop at once.
          this.stopLeading(`lease taken by ${this.observedHolder ?? 'another candidate'}`);
        } else if (performance.now() - this.lastRenew >= this.renewDeadlineMs) {
          this.stopLeading('renew deadline passed');
        }
      }
    } finally {
      clearTimeout(watchdog);
    }
    if (this.leading) {
      this.stopLeading('stopped');
      if (this.opts.releaseOnCancel ?? true) await this.release();
    }
  }

  /** Ends leadership at lastRenew + renewDeadline even while a renewal request hangs. */
  private armWatchdog(): NodeJS.Timeout {
    const t = setTimeout(
      () => {
        if (this.leading) this.stopLeading('renew deadline passed');
      },
      Math.max(0, this.lastRenew + this.renewDeadlineMs - performance.now()),
    );
    t.unref();
    return t;
  }

  private jittered(): number {
    return this.retryPeriodMs * (1 + Math.random() * JITTER);
  }

  private startLeading(): void {
    this.leading = true;
    this.leadCtl = new AbortController();
    this.opts.metrics?.leaderStatus.set({ name: this.opts.name }, 1);
    this.opts.metrics?.leaderTransitions.inc({ name: this.opts.name });
    this.log.info('became leader');
    if (this.opts.onStartedLeading) {
      const signal = this.leadCtl.signal;
      Promise.resolve()
        .then(() => this.opts.onStartedLeading!(signal))
        .catch((err: unknown) => this.log.error('onStartedLeading threw', { error: err }));
    }
  }

  private stopLeading(why: string): void {
    if (!this.leading) return;
    this.leading = false;
    this.leadCtl?.abort();
    this.opts.metrics?.leaderStatus.set({ name: this.opts.name }, 0);
    this.opts.metrics?.leaderTransitions.inc({ name: this.opts.name });
    this.log.info('stopped leading', { why });
    try {
      this.opts.onStoppedLeading?.();
    } catch (err) {
      this.log.error('onStoppedLeading threw', { error: err });
    }
  }

  private observe(spec: LeaseSpec): void {
    const same =
      this.observed !== undefined &&
      this.observed.holderIdentity === spec.holderIdentity &&
      this.observed.renewTime === spec.renewTime &&
      this.observed.acquireTime === spec.acquireTime &&
      this.observed.leaseDurationSeconds === spec.leaseDurationSeconds &&
      this.observed.leaseTransitions === spec.leaseTransitions;
    if (!same) {
      this.observed = { ...spec };
      this.observedAt = performance.now();
    }
    const holder = spec.holderIdentity ?? '';
    if (holder !== '' && holder !== this.observedHolder) {
      this.observedHolder = holder;
      try {
        this.opts.onNewLeader?.(holder);
      } catch (err) {
        this.log.error('onNewLeader threw', { error: err });
      }
    }
  }

  /** One attempt; true when this identity holds the lease afterwards. Errors count as "not acquired". */
  private async tryAcquireOrRenew(timeoutMs?: number): Promise<boolean> {
    const id = this.opts.identity;
    const durationSeconds = this.leaseDurationMs / 1000;
    try {
      const signal = timeoutMs !== undefined ? AbortSignal.timeout(Math.max(1, Math.ceil(timeoutMs))) : undefined;
      const lease = await this.leases.find(this.opts.name, { signal });
      const now = microTime();
      if (!lease) {
        const spec: LeaseSpec = {
          holderIdentity: id,
          leaseDurationSeconds: durationSeconds,
          acquireTime: now,
          renewTime: now,
          leaseTransitions: 0,
        };
        await this.leases.create({ metadata: { name: this.opts.name, namespace: this.opts.namespace }, spec }, { signal });
        this.observe(spec);
        return true;
      }
      const old = lease.spec ?? {};
      this.observe(old);
      const holder = old.holderIdentity ?? '';
      const validMs = (old.leaseDurationSeconds ?? durationSeconds) * 1000;
      if (holder !== '' && holder !== id && this.observedAt + validMs > performance.now()) {
        this.foreignExpiry = this.observedAt + validMs;
        return false;
      }
      this.foreignExpiry = 0;
      const spec: LeaseSpec = {
        holderIdentity: id,
        leaseDurationSeconds: durationSeconds,
        renewTime: now,
        acquireTime: holder === id ? (old.acquireTime ?? now) : now,
        leaseTransitions: holder === id ? (old.leaseTransitions ?? 0) : (old.leaseTransitions ?? 0) + 1,
      };
      await this.leases.update({ ...lease, spec }, { signal });
      this.observe(spec);
      return true;
    } catch (err) {
      if (!isConflict(err) && !isAlreadyExists(err)) this.log.warn('lease update failed', { error: err });
      return false;
    }
  }

  /** Clears holderIdentity if this identity still holds the lease (client-go's release). */
  private async release(): Promise<void> {
    try {
      const lease = await this.leases.get(this.opts.name, { signal: AbortSignal.timeout(this.renewDeadlineMs) });
      if (lease.spec?.holderIdentity !== this.opts.identity) return;
      const now = microTime();
      await this.leases.update(
        {
          ...lease,
          spec: {
            holderIdentity: '',
            leaseDurationSeconds: 1,
            acquireTime: now,
            renewTime: now,
            leaseTransitions: lease.spec.leaseTransitions ?? 0,
          },
        },
        { signal: AbortSignal.timeout(this.renewDeadlineMs) },
      );
      this.log.info('released lease');
    } catch (err) {
      if (!isConflict(err) && !isNotFound(err)) this.log.warn('lease release failed', { error: err });
    }
  }
}

/** What runs while leading: a controller, or several behind one start/stop. */
export interface Startable {
  start(): Promise<void>;
  stop(): Promise<void>;
}

export interface LeaderRunnerOptions extends Omit<LeaderElectionOptions, 'onStartedLeading' | 'onStoppedLeading'> {
  /** Leadership lost otherwise than through stop(): the caller exits (controller-runtime's manager does). */
  onLost(): void;
  /** The task's start() rejected (not reported once stop() was called). */
  onStartFailed(err: unknown): void;
}

/**
 * Runs a task only while this process holds the Lease, with controller-runtime's manager semantics: the task
 * starts when leadership is acquired and is stopped as soon as it ends, so nothing is written after
 * leadership is lost, even before the process exits; a loss not caused by stop() goes to onLost. stop()
 * stops the task, then releases the Lease, so a standby takes over within about one retry period without
 * overlapping this process's writes. The task never starts after stop() or after leadership ended, and
 * runs at most once (an elector campaigns once: a process that lost leadership exits and restarts).
 */
export class LeaderRunner {
  readonly elector: LeaderElector;
  private stopping = false;
  private started: Promise<void> | undefined;
  private taskStopped: Promise<void> | undefined;

  constructor(
    private readonly task: Startable,
    opts: LeaderRunnerOptions,
  ) {
    const { onLost, onStartFailed, ...election } = opts;
    this.elector = new LeaderElector({
      ...election,
      onStartedLeading: (signal) => {
        if (signal.aborted || this.taskStopped) return;
        this.started = task.start();
        this.started.catch((err: unknown) => {
          if (!this.stopping) onStartFailed(err);
        });
        signal.addEventListener('abort', () => void this.stopTask(), { once: true });
      },
      onStoppedLeading: () => {
        if (!this.stopping) onLost();
      },
    });
  }

  /** Campaigns; resolves when leadership ends or stop() is called. Call once. */
  run(): Promise<void> {
    return this.elector.run();
  }

  isLeader(): boolean {
    return this.elector.isLeader();
  }

  /** Stops the task (waiting for a start in flight), then stops leading and releases the Lease. */
  async stop(): Promise<void> {
    this.stopping = true;
    try {
      await this.stopTask();
    } finally {
      await this.elector.stop();
    }
  }

  private stopTask(): Promise<void> {
    this.taskStopped ??= (async () => {
      await this.started?.catch(() => undefined);
      if (this.started) await this.task.stop();
    })();
    return this.taskStopped;
  }
}
