/**
 * The client side of on-demand egress NAT in coild (--enable-egress).
 *
 * A pod annotated `egress.coil.cybozu.com/<egress namespace>: name1,name2` gets FoU tunnels to those
 * Egresses' Services. plan() resolves the annotation before the pod's network exists (an unknown Egress
 * fails the ADD before anything is allocated); configFor() turns the plan into the NAT client's
 * configuration once the pod's addresses are known; the NAT client (src/egress/nat-client.ts, the datapath
 * half) programs the pod's netns.
 *
 * Live updates: Egresses and their Services are watched; when an Egress's destinations or
 * fouSourcePortAuto, or its Service's ClusterIPs, change, every pod of this node using it is reconciled
 * again (the NAT client converges), under the pod's container lock. Pods this process did not set up
 * (coild restarted) are matched to their Pod objects by address, and their netns is found from the host
 * veth (netns-finder.ts): nothing is kept in files.
 */
import { CniCode, CniError, openNetns, type Netns } from '@cnikit/netlib';
import {
  Informer,
  MetricsIn,
  Pods,
  ResourceClient,
  isNotFound,
  traceLogger,
  type KubeTransport,
  type Logger,
  type Pod,
} from '@cnikit/kube';
import type { Gauge, Registry } from '@cnikit/kube/prom';
import { Egresses, LABEL_APP_COMPONENT, LABEL_APP_NAME, Services, egressesOfPod, type Egress, type Service } from '../api/egress';
import { isValidPoolName } from '../api/types';
import { findPeerNetns } from './netns-finder';
import type { PodInfo } from './podnetwork';

import type { EgressPeer, NatClientConfig } from '../egress/nat-client';
export type { EgressPeer, NatClientConfig };

/** The datapath's API (src/egress/nat-client.ts), injectable: the host kernel of the tests has no FoU. */
export interface NatClient {
  reconcileNatClient(netnsPath: string, cfg: NatClientConfig): Promise<void>;
  removeNatClient(netnsPath: string): Promise<void>;
  readNatClient(
    netnsPath: string,
  ): Promise<{ fouPort?: number; peers: Array<{ peer: string; sportAuto: boolean; destinations: string[] }> }>;
}

/** The real NAT client, loaded on first use (coild without --enable-egress never loads it). */
export function defaultNatClient(): NatClient {
  let mod: NatClient | undefined;
  // require() at first use: esbuild still bundles the module, and the assignment checks it against NatClient.
  const load = (): NatClient => (mod ??= require('../egress/nat-client') as typeof import('../egress/nat-client'));
  return {
    reconcileNatClient: (p, c) => load().reconcileNatClient(p, c),
    removeNatClient: (p) => load().removeNatClient(p),
    readNatClient: (p) => load().readNatClient(p),
  };
}

/** An Egress with what its Service answered, before the pod's families are known. */
interface ResolvedEgress {
  namespace: string;
  name: string;
  clusterIPs: string[];
  destinations: string[];
  fouSourcePortAuto: boolean;
}

/** A pod of this node that uses egress NAT. */
export interface EgressClientPod {
  containerId: string;
  ifname: string;
  podNamespace: string;
  podName: string;
  hostIndex: number;
  ipv4?: string;
  ipv6?: string;
  /** Known when this process set the pod up; found from the host veth otherwise. */
  netns?: string;
  egresses: { namespace: string; name: string }[];
}

export interface EgressClientOptions {
  transport: KubeTransport;
  nodeName: string;
  hostNs: Netns;
  fouPort: number;
  natClient: NatClient;
  registry?: Registry;
  logger?: Logger;
  /** Runs fn under the container's lock (coild's per-container-ID mutex). */
  lock<T>(containerId: string, fn: () => Promise<T>): Promise<T>;
}

const key = (ns: string, name: string): string => `${ns}/${name}`;

export class EgressClient {
  readonly egressInformer: Informer<Egress>;
  readonly serviceInformer: Informer<Service>;
  readonly podInformer: Informer<Pod>;
  private readonly egresses: ResourceClient<Egress>;
  private readonly services: ResourceClient<Service>;
  private readonly pods: ResourceClient<Pod>;
  /** By "<containerID>/<ifname>". */
  private readonly clients = new Map<string, EgressClientPod>();
  private readonly podCount?: Gauge<'namespace' | 'egress'>;
  private readonly podInfo?: Gauge<'namespace' | 'pod' | 'interface' | 'egress' | 'egress_namespace'>;
  private readonly log: Logger;
  /** Reconciles that failed and are retried (by attachment key). */
  private readonly retry = new Map<string, NodeJS.Timeout>();
  private stopped = false;
  /** Reconciles under way: stop() waits for them, so no netns is touched after it returns. */
  private readonly running = new Set<Promise<void>>();
  /** The attachments the kernel showed at the last start (adopted when their Pod gets its addresses). */
  private kernelPods: PodInfo[] = [];

  constructor(private readonly opts: EgressClientOptions) {
    const t = opts.transport;
    this.log = opts.logger ?? traceLogger('coild.egress', { node: opts.nodeName });
    this.egresses = new ResourceClient(t, Egresses);
    this.services = new ResourceClient(t, Services);
    this.pods = new ResourceClient(t, Pods);
    this.egressInformer = new Informer(this.egresses);
    this.serviceInformer = new Informer(this.services, { labelSelector: `${LABEL_APP_NAME}=coil,${LABEL_APP_COMPONENT}=egress` });
    // Only this node's pods: to map pods coild did not set up in this lifetime to their Pod objects.
    this.podInformer = new Informer(this.pods, {
      fieldSelector: `spec.nodeName=${opts.nodeName}`,
      indexers: { ip: (p) => (p.status?.podIPs ?? []).map((x) => x.ip) },
    });
    if (opts.registry) {
      const m = new MetricsIn(opts.registry);
      this.podCount = m.gauge('coil_egress_client_pod_count', 'the number of pods on this node using the egress', ['namespace', 'egress']);
      this.podInfo = m.gauge('coil_egress_client_pod_info', 'a pod on this node using the egress (always 1)', [
        'namespace',
        'pod',
        'interface',
        'egress',
        'egress_namespace',
      ]);
    }
    this.egressInformer.addHandlers({
      update: (o, n) => {
        if (
          JSON.stringify([o.spec.destinations, o.spec.fouSourcePortAuto ?? false]) !==
          JSON.stringify([n.spec.destinations, n.spec.fouSourcePortAuto ?? false])
        ) {
          this.refresh(n.metadata.namespace!, n.metadata.name!, 'egress changed');
        }
      },
      // An Egress created after a pod asked for it (the ADD failed then) or re-created: pods holding it converge.
      add: (n) => this.refresh(n.metadata.namespace!, n.metadata.name!, 'egress added'),
    });
    this.podInformer.addHandlers({ update: (_o, n) => this.adoptPod(n) });
    this.serviceInformer.addHandlers({
      update: (o, n) => {
        if (JSON.stringify(clusterIPsOf(o)) !== JSON.stringify(clusterIPsOf(n)))
          this.refresh(n.metadata.namespace!, n.metadata.name!, 'service ClusterIPs changed');
      },
      // A Service deleted and re-created gets new ClusterIPs: the pods' tunnels follow.
      add: (n) => this.refresh(n.metadata.namespace!, n.metadata.name!, 'service added'),
    });
  }

  /** Starts the watches, then adopts the pods the kernel shows (`pods`: coild's attachments) and reconciles them. */
  async start(pods: PodInfo[]): Promise<void> {
    this.stopped = false;
    this.kernelPods = pods;
    await Promise.all([this.egressInformer.start(), this.serviceInformer.start(), this.podInformer.start()]);
    for (const p of pods) this.adopt(p);
    for (const k of this.clients.keys()) this.schedule(k, 0);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    for (const t of this.retry.values()) clearTimeout(t);
    this.retry.clear();
    await Promise.all([this.egressInformer.stop(), this.serviceInformer.stop(), this.podInformer.stop()]);
    await Promise.all([...this.running]);
  }

  synced(): boolean {
    return this.egressInformer.hasSynced() && this.serviceInformer.hasSynced() && this.podInformer.hasSynced();
  }

  /** The pods using egress NAT on this node (tests, metrics). */
  list(): EgressClientPod[] {
    return [...this.clients.values()];
  }

  /**
   * What the pod asks for, resolved: undefined when it asks for nothing. Throws a CniError for a malformed
   * annotation, an unknown Egress (code 7), or a Service that does not exist or has no ClusterIP yet (11).
   */
  async plan(podNamespace: string | undefined, podName: string | undefined, podUid?: string): Promise<ResolvedEgress[] | undefined> {
    if (!podNamespace || !podName) return undefined;
    // The node's pod cache answers when it already holds this very pod (same UID, when the runtime passes
    // K8S_POD_UID): no API round trip on the ADD path. Otherwise (cache behind, pod re-created) ask the API.
    let pod = this.podInformer.store.get(key(podNamespace, podName));
    if (!pod || !podUid || pod.metadata.uid !== podUid) {
      try {
        pod = await this.pods.get(podName, { namespace: podNamespace });
      } catch (err) {
        if (isNotFound(err))
          throw new CniError(CniCode.TryAgainLater, 'pod not found', `${podNamespace}/${podName}: egress NAT needs the Pod object`, {
            cause: err,
          });
        throw err;
      }
    }
    const wanted = egressesOfPod(pod.metadata.annotations);
    if (!wanted.length) return undefined;
    return Promise.all(wanted.map((w) => this.resolve(w.namespace, w.name)));
  }

  private async resolve(namespace: string, name: string): Promise<ResolvedEgress> {
    if (!isValidPoolName(namespace) || !isValidPoolName(name)) {
      throw new CniError(
        CniCode.InvalidNetworkConfig,
        'malformed egress.coil.cybozu.com annotation',
        `${JSON.stringify(namespace)}: ${JSON.stringify(name)} is not an Egress reference`,
      );
    }
    const eg = this.egressInformer.store.get(key(namespace, name)) ?? (await this.egresses.find(name, { namespace }));
    if (!eg) throw new CniError(CniCode.InvalidNetworkConfig, 'egress not found', `Egress ${namespace}/${name}`);
    const svc = this.serviceInformer.store.get(key(namespace, name)) ?? (await this.services.find(name, { namespace }));
    if (!svc)
      throw new CniError(
        CniCode.TryAgainLater,
        'egress service not found',
        `Service ${namespace}/${name} (coil-egress-controller creates it)`,
      );
    const clusterIPs = clusterIPsOf(svc);
    if (!clusterIPs.length) throw new CniError(CniCode.TryAgainLater, 'egress service has no ClusterIP', `Service ${namespace}/${name}`);
    return { namespace, name, clusterIPs, destinations: eg.spec.destinations, fouSourcePortAuto: eg.spec.fouSourcePortAuto ?? false };
  }

  /**
   * The NAT configuration for a pod with these addresses: per Egress, the Service's ClusterIP of each of the
   * pod's families and the destinations of those families. An Egress reachable in none of them is an error.
   */
  configFor(plan: ResolvedEgress[], ipv4?: string, ipv6?: string): NatClientConfig {
    const cfg: NatClientConfig = { fouPort: this.opts.fouPort, egresses: [] };
    if (ipv4) cfg.podIPv4 = ipv4;
    if (ipv6) cfg.podIPv6 = ipv6;
    for (const r of plan) {
      const peer: EgressPeer = { namespace: r.namespace, name: r.name, destinations: [], fouSourcePortAuto: r.fouSourcePortAuto };
      const v4 = ipv4 ? r.clusterIPs.find((a) => !a.includes(':')) : undefined;
      const v6 = ipv6 ? r.clusterIPs.find((a) => a.includes(':')) : undefined;
      if (v4) peer.peerIPv4 = v4;
      if (v6) peer.peerIPv6 = v6;
      if (!v4 && !v6) {
        throw new CniError(
          CniCode.InvalidNetworkConfig,
          "egress service has no ClusterIP of the pod's address family",
          `Service ${r.namespace}/${r.name} has ${r.clusterIPs.join(', ')}; pod has ${[ipv4, ipv6].filter(Boolean).join(', ')}`,
        );
      }
      // Destinations of a family without a tunnel cannot be routed through this Egress.
      peer.destinations = r.destinations.filter((d) => (d.includes(':') ? Boolean(v6) : Boolean(v4)));
      cfg.egresses.push(peer);
    }
    return cfg;
  }

  /** Programs the pod's netns (ADD, after the pod network exists). */
  async apply(netns: string, cfg: NatClientConfig): Promise<void> {
    await this.opts.natClient.reconcileNatClient(netns, cfg);
  }

  /** Removes every tunnel and rule of the NAT client from the pod's netns (ADD rollback). */
  async remove(netns: string): Promise<void> {
    await this.opts.natClient.removeNatClient(netns);
  }

  /** Records a pod set up by ADD. */
  register(p: EgressClientPod): void {
    this.clients.set(`${p.containerId}/${p.ifname}`, p);
    this.updateMetrics();
  }

  /** Forgets a pod (DEL): its netns, and the tunnels in it, go with the pod. Idempotent. */
  unregister(containerId: string, ifname: string): void {
    const k = `${containerId}/${ifname}`;
    this.kernelPods = this.kernelPods.filter((p) => p.containerId !== containerId || p.ifname !== ifname);
    const t = this.retry.get(k);
    if (t) clearTimeout(t);
    this.retry.delete(k);
    if (this.clients.delete(k)) this.updateMetrics();
  }

  /** A pod from the kernel (coild start-up): adopted when its Pod object, found by address, asks for egress. */
  private adopt(p: PodInfo): void {
    if (this.clients.has(`${p.containerId}/${p.ifname}`)) return;
    const ip = p.ipv4 ?? p.ipv6;
    if (!ip) return;
    // An address may still be listed by a finished pod it was freed from: prefer a live one.
    const live = (x: Pod): boolean => !x.metadata.deletionTimestamp && x.status?.phase !== 'Succeeded' && x.status?.phase !== 'Failed';
    const pod = this.podInformer.store.byIndex('ip', ip).find(live);
    if (!pod) return;
    const egresses = egressesOfPod(pod.metadata.annotations);
    if (!egresses.length) return;
    const c: EgressClientPod = {
      containerId: p.containerId,
      ifname: p.ifname,
      podNamespace: pod.metadata.namespace!,
      podName: pod.metadata.name!,
      hostIndex: p.hostIndex,
      egresses,
    };
    if (p.ipv4) c.ipv4 = p.ipv4;
    if (p.ipv6) c.ipv6 = p.ipv6;
    this.register(c);
  }

  /** A Pod of this node got its addresses after start-up (kubelet writes them after ADD): adopt its attachment. */
  private adoptPod(pod: Pod): void {
    const ips = new Set((pod.status?.podIPs ?? []).map((x) => x.ip));
    if (!ips.size) return;
    for (const p of this.kernelPods) {
      const k = `${p.containerId}/${p.ifname}`;
      if (this.clients.has(k) || !((p.ipv4 && ips.has(p.ipv4)) || (p.ipv6 && ips.has(p.ipv6)))) continue;
      this.adopt(p);
      if (this.clients.has(k)) this.schedule(k, 0);
    }
  }

  /** Re-runs the NAT client for every pod using the Egress. */
  private refresh(namespace: string, name: string, why: string): void {
    for (const [k, c] of this.clients) {
      if (!c.egresses.some((e) => e.namespace === namespace && e.name === name)) continue;
      this.log.info('updating egress NAT of a pod', {
        why,
        egress: key(namespace, name),
        pod: key(c.podNamespace, c.podName),
        containerId: c.containerId,
      });
      this.schedule(k, 0);
    }
  }

  private schedule(k: string, delayMs: number): void {
    if (this.stopped) return;
    const prev = this.retry.get(k);
    if (prev) clearTimeout(prev);
    const timer = setTimeout(() => {
      this.retry.delete(k);
      const run = this.reconcilePod(k).then(
        () => undefined,
        (err: unknown) => {
          const next = Math.min(Math.max(delayMs * 2, 500), 30_000);
          this.log.warn('egress NAT update failed; retrying', { key: k, inMs: next, error: err });
          if (this.clients.has(k)) this.schedule(k, next);
        },
      );
      this.running.add(run);
      void run.finally(() => this.running.delete(run));
    }, delayMs);
    timer.unref();
    this.retry.set(k, timer);
  }

  /** Converges one pod's netns to the current Egresses and Services (idempotent). */
  async reconcilePod(k: string): Promise<void> {
    const c = this.clients.get(k);
    if (!c) return;
    await this.opts.lock(c.containerId, async () => {
      if (this.clients.get(k) !== c) return; // deleted meanwhile
      let cfg: NatClientConfig;
      try {
        const plan = await Promise.all(c.egresses.map((e) => this.resolve(e.namespace, e.name)));
        cfg = this.configFor(plan, c.ipv4, c.ipv6);
      } catch (err) {
        // An Egress deleted under running pods (or its Service left without a ClusterIP of the pod's
        // family): their tunnels are left as they are, as Coil does, rather than dropped, which would send
        // that traffic out without NAT. Re-creating it converges them (the add handlers).
        if (err instanceof CniError && err.code === CniCode.InvalidNetworkConfig) {
          this.log.warn('egress NAT of a pod not updated', {
            pod: key(c.podNamespace, c.podName),
            reason: err.message,
            details: err.details,
          });
          return;
        }
        throw err;
      }
      const netns = await this.netnsOf(c);
      await this.opts.natClient.reconcileNatClient(netns, cfg);
    });
  }

  /** The pod's netns path: the one ADD was given while it still opens, else found from the host veth. */
  private async netnsOf(c: EgressClientPod): Promise<string> {
    if (c.netns) {
      try {
        openNetns(c.netns).close();
        return c.netns;
      } catch {
        c.netns = undefined;
      }
    }
    const found = await findPeerNetns(this.opts.hostNs, c.hostIndex);
    if (!found) throw new Error(`egress: netns of ${c.podNamespace}/${c.podName} (container ${c.containerId}) not found`);
    c.netns = found;
    return found;
  }

  private updateMetrics(): void {
    if (!this.podCount || !this.podInfo) return;
    this.podCount.reset();
    this.podInfo.reset();
    const counts = new Map<string, number>();
    for (const c of this.clients.values()) {
      for (const e of c.egresses) {
        counts.set(key(e.namespace, e.name), (counts.get(key(e.namespace, e.name)) ?? 0) + 1);
        this.podInfo.set(
          { namespace: c.podNamespace, pod: c.podName, interface: c.ifname, egress: e.name, egress_namespace: e.namespace },
          1,
        );
      }
    }
    for (const [k, n] of counts) {
      const i = k.indexOf('/');
      this.podCount.set({ namespace: k.slice(0, i), egress: k.slice(i + 1) }, n);
    }
  }
}

function clusterIPsOf(svc: Service): string[] {
  const ips = svc.spec.clusterIPs?.length ? svc.spec.clusterIPs : svc.spec.clusterIP ? [svc.spec.clusterIP] : [];
  return ips.filter((ip) => ip && ip !== 'None');
}
