/**
 * coil-egress's loop: watches Pods (every namespace) and its own Egress, and converges the
 * router pod's netns (router.ts) to the clients' addresses. Reconciles are serialized and
 * coalesced (a burst of pod events makes one pass), and repeated every `resyncMs` to repair
 * anything changed behind our back.
 */
import { Informer, isNotFound, Pods, ResourceClient, type KubeTransport, type Pod } from '@cnikit/kube';
import type { Netns } from '@cnikit/netlib';
import { DEFAULT_FOU_PORT } from './constants';
import { clientAddresses } from './clients';
import { Egresses, type Egress } from '../api/egress';
import { reconcileRouter, type RouterReconcileResult } from './router';
import { DEFAULT_UPLINK, type RouterConfig } from './router-plan';
import { ensureSnat, type NatBackend, type SnatConfig } from './snat';
import { sleep } from '@cnikit/netlib/retry';

export interface RouterDaemonOptions {
  transport: KubeTransport;
  /** The router pod's netns (its own, in production). */
  ns: Netns;
  /** COIL_POD_NAMESPACE: the Egress's namespace. */
  namespace: string;
  podName: string;
  egressName: string;
  podIPv4?: string;
  podIPv6?: string;
  fouPort?: number;
  backend: NatBackend;
  uplink?: string;
  resyncMs?: number;
  /** The kernel side; tests on a kernel without FoU pass a recorder. Default router.ts and snat.ts. */
  datapath?: RouterDatapath;
  log?: (level: 'info' | 'warn' | 'error', msg: string, fields?: Record<string, unknown>) => void;
}

export interface RouterDatapath {
  reconcile(ns: Netns, cfg: RouterConfig): Promise<RouterReconcileResult>;
  ensureSnat(ns: Netns, backend: NatBackend, cfg: SnatConfig): Promise<boolean>;
}

const kernelDatapath: RouterDatapath = { reconcile: reconcileRouter, ensureSnat };

export class RouterDaemon {
  readonly pods: Informer<Pod>;
  private egresses: Informer<Egress> | undefined;
  private pending = false;
  private running: Promise<void> | undefined;
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;
  private lastOk = false;
  private served = 0;
  private noCrd = false;
  private readonly dp: RouterDatapath;
  private readonly log: NonNullable<RouterDaemonOptions['log']>;
  private readonly kick = { add: () => this.schedule(), update: () => this.schedule(), delete: () => this.schedule() };

  constructor(private readonly opts: RouterDaemonOptions) {
    this.pods = new Informer(new ResourceClient(opts.transport, Pods), { name: 'pods' });
    this.pods.addHandlers(this.kick);
    this.log = opts.log ?? (() => undefined);
    this.dp = opts.datapath ?? kernelDatapath;
  }

  /** Clients served after the last pass. */
  get clientCount(): number {
    return this.served;
  }

  /** Ready once the caches are synced and the last pass succeeded. */
  isReady(): boolean {
    return this.pods.hasSynced() && this.lastOk;
  }

  /** The Egress's fouSourcePortAuto; false (fixed port) when the Egress or its CRD is missing. */
  sportAuto(): boolean {
    const e = this.egresses?.store.list().find((x) => x.metadata.name === this.opts.egressName);
    return e?.spec?.fouSourcePortAuto === true;
  }

  /** Installs SNAT, syncs the caches and runs the first pass. Safe to call again after a failure. */
  async start(): Promise<void> {
    await this.dp.ensureSnat(this.opts.ns, this.opts.backend, {
      uplink: this.opts.uplink ?? DEFAULT_UPLINK,
      podIPv4: this.opts.podIPv4,
      podIPv6: this.opts.podIPv6,
    });
    if (!this.egresses && !this.noCrd) {
      const egressClient = new ResourceClient(this.opts.transport, Egresses, { namespace: this.opts.namespace });
      try {
        await egressClient.list({ limit: 1 });
        this.egresses = new Informer(egressClient, {
          namespace: this.opts.namespace,
          fieldSelector: `metadata.name=${this.opts.egressName}`,
          name: 'egresses',
        });
        this.egresses.addHandlers(this.kick);
      } catch (err) {
        if (!isNotFound(err)) throw err;
        this.noCrd = true;
        this.log('warn', 'Egress CRD not installed: encap source port fixed to the FoU port');
      }
    }
    await Promise.all([this.pods.start(), this.egresses?.start()]);
    this.schedule();
    this.timer ??= setInterval(() => this.schedule(), this.opts.resyncMs ?? 60_000);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    await Promise.all([this.pods.stop(), this.egresses?.stop()]);
    await this.running;
  }

  /** Waits until every pass asked for so far has run (tests). */
  async idle(): Promise<void> {
    while (this.running) await this.running;
  }

  schedule(): void {
    if (this.stopped) return;
    this.pending = true;
    this.running ??= this.loop().finally(() => {
      this.running = undefined;
      // An event that arrived after the loop's last check must not wait for the next resync.
      if (this.pending) this.schedule();
    });
  }

  private async loop(): Promise<void> {
    while (this.pending && !this.stopped) {
      this.pending = false;
      // Let a burst of events land before reading the cache.
      await sleep(50);
      try {
        const r = await this.reconcileOnce();
        this.lastOk = true;
        if (r.created.length || r.changed.length || r.removed.length) this.log('info', 'tunnels changed', { ...r });
      } catch (err) {
        this.lastOk = false;
        this.log('error', 'reconcile failed', { error: (err as Error).message });
        // Try again later rather than spin on a persistent error.
        setTimeout(() => this.schedule(), 5_000).unref();
      }
    }
  }

  async reconcileOnce(): Promise<RouterReconcileResult> {
    const clients = clientAddresses(this.pods.store.list(), this.opts.namespace, this.opts.egressName);
    const r = await this.dp.reconcile(this.opts.ns, {
      fouPort: this.opts.fouPort ?? DEFAULT_FOU_PORT,
      podIPv4: this.opts.podIPv4,
      podIPv6: this.opts.podIPv6,
      uplink: this.opts.uplink,
      sportAuto: this.sportAuto(),
      clients,
    });
    this.served = r.clients;
    return r;
  }
}
