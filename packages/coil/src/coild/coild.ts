/**
 * coild's core, independent of gRPC: the CNI verbs on top of NodeIPAM (addresses), PodNetwork (kernel) and
 * RouteExporter (table 119). Per-container-ID locks serialize the verbs of one container; nothing else is
 * serialized. Start-up follows Coil: init the kernel (ip rule), load the node's blocks, register every pod
 * the kernel shows (COIL: aliases + table-116 routes), GC unused blocks, sync the export table.
 */
import {
  CniCode,
  CniError,
  UndoStack,
  optionalPrevResultOf,
  parseNetConf,
  validAttachments,
  type Netns,
  type Result,
} from '@cnikit/netlib';
import { Informer, Namespaces, Nodes, ResourceClient, traceLogger, type KubeTransport, type Logger, type Namespace } from '@cnikit/kube';
import type { Registry } from '@cnikit/kube/prom';
import { ANNOTATION_POOL, DEFAULT_POOL, isValidPoolName } from '../api/types';
import type { CNIArgs } from '../rpc/codec';
import { KeyedMutex } from '../util';
import { EgressClient, defaultNatClient, type NatClient } from './egress';
import { RouteExporter } from './export';
import { NodeIPAM, type OwnedBlock } from './nodeipam';
import { PodNetwork, type PodInfo, type PodNetworkConfig } from './podnetwork';

export interface CoildOptions {
  transport: KubeTransport;
  nodeName: string;
  /** The node's network namespace (coild's own in production). */
  hostNs: Netns;
  podTableId?: number;
  podRulePrio?: number;
  exportTableId?: number;
  protocolId?: number;
  compatCalico?: boolean;
  gcIntervalMs?: number;
  logger?: Logger;
  /** Egress NAT client side (--enable-egress). */
  egress?: { fouPort: number; natClient?: NatClient };
  /** Where coild's own metrics go (egress client metrics). */
  registry?: Registry;
}

export class Coild {
  readonly ipam: NodeIPAM;
  readonly podNetwork: PodNetwork;
  readonly exporter: RouteExporter;
  readonly namespaces: Informer<Namespace>;
  readonly egress: EgressClient | undefined;
  private readonly locks = new KeyedMutex();
  /** The pods of this node by "<containerID>/<ifname>": rebuilt from the kernel at start, kept current by ADD/DEL. */
  private readonly attachments = new Map<string, PodInfo>();
  private readonly log: Logger;
  private ready = false;
  private gcTimer: NodeJS.Timeout | undefined;
  private readonly pnCfg: PodNetworkConfig;

  constructor(private readonly opts: CoildOptions) {
    this.log = opts.logger ?? traceLogger('coild', { node: opts.nodeName });
    this.pnCfg = {
      podTableId: opts.podTableId ?? 116,
      podRulePrio: opts.podRulePrio ?? 2000,
      protocolId: opts.protocolId ?? 30,
      compatCalico: opts.compatCalico ?? false,
    };
    this.podNetwork = new PodNetwork(opts.hostNs, this.pnCfg);
    this.exporter = new RouteExporter(opts.hostNs, opts.exportTableId ?? 119, opts.protocolId ?? 30);
    this.ipam = new NodeIPAM(
      opts.transport,
      opts.nodeName,
      {
        blockAdded: (b: OwnedBlock) => this.exportBlock(b, true),
        blockRemoved: (b: OwnedBlock) => this.exportBlock(b, false),
      },
      { logger: this.log },
    );
    this.namespaces = new Informer(new ResourceClient(opts.transport, Namespaces));
    if (opts.egress) {
      this.egress = new EgressClient({
        transport: opts.transport,
        nodeName: opts.nodeName,
        hostNs: opts.hostNs,
        fouPort: opts.egress.fouPort,
        natClient: opts.egress.natClient ?? defaultNatClient(),
        registry: opts.registry,
        logger: this.log,
        lock: (containerId, fn) => this.locks.run(containerId, fn),
      });
    }
  }

  private async exportBlock(b: OwnedBlock, add: boolean): Promise<void> {
    for (const c of NodeIPAM.cidrsOf(b)) await (add ? this.exporter.add(c) : this.exporter.remove(c));
  }

  async start(): Promise<void> {
    await this.podNetwork.init();
    await this.namespaces.start();
    await this.ipam.load();
    const node = await new ResourceClient(this.opts.transport, Nodes).get(this.opts.nodeName);
    for (const a of node.status?.addresses ?? []) {
      if (a.type !== 'InternalIP') continue;
      if (a.address.includes(':')) this.pnCfg.hostIPv6 ??= a.address;
      else this.pnCfg.hostIPv4 ??= a.address;
    }
    let orphans = 0;
    this.attachments.clear();
    for (const p of await this.podNetwork.list()) {
      this.attachments.set(`${p.containerId}/${p.ifname}`, p);
      if (!this.ipam.register(p.pool, { ipv4: p.ipv4, ipv6: p.ipv6 })) orphans++;
    }
    if (orphans) this.log.warn("pods with addresses outside the node's blocks", { count: orphans });
    await this.ipam.gc();
    await this.egress?.start([...this.attachments.values()]);
    await this.exporter.sync(this.ipam.owned().flatMap((b) => NodeIPAM.cidrsOf(b)));
    const every = this.opts.gcIntervalMs ?? 300_000;
    this.gcTimer = setInterval(() => {
      this.ipam.gc().catch((err: unknown) => this.log.warn('block GC failed', { error: err }));
    }, every);
    this.gcTimer.unref();
    this.ready = true;
    this.log.info('started', { blocks: this.ipam.owned().length });
  }

  async stop(): Promise<void> {
    this.ready = false;
    if (this.gcTimer) clearInterval(this.gcTimer);
    await this.namespaces.stop();
    await this.egress?.stop();
  }

  isReady(): boolean {
    return this.ready && this.namespaces.hasSynced() && (this.egress?.synced() ?? true);
  }

  /** The pool of a pod: its namespace's annotation, else "default". Pods cannot choose. */
  async poolFor(namespace: string | undefined): Promise<string> {
    if (!namespace) return DEFAULT_POOL;
    let ns = this.namespaces.store.get(namespace);
    ns ??= await new ResourceClient(this.opts.transport, Namespaces).find(namespace);
    if (!ns) throw new CniError(CniCode.InvalidNetworkConfig, 'namespace not found', namespace);
    const v = ns.metadata.annotations?.[ANNOTATION_POOL];
    if (v === undefined) return DEFAULT_POOL;
    if (!isValidPoolName(v)) {
      throw new CniError(
        CniCode.InvalidNetworkConfig,
        `malformed ${ANNOTATION_POOL} annotation`,
        `namespace ${namespace}: ${JSON.stringify(v)} is not a pool name`,
      );
    }
    return v;
  }

  private notReady(): void {
    if (!this.ready) throw new CniError(CniCode.TryAgainLater, 'coild is starting');
  }

  async add(a: CNIArgs): Promise<Result> {
    this.notReady();
    return this.locks.run(a.containerId, async () => {
      const podNamespace = a.args['K8S_POD_NAMESPACE'];
      const podName = a.args['K8S_POD_NAME'];
      const pool = await this.poolFor(podNamespace);
      // Egresses are resolved before anything is allocated: an unknown one fails the ADD with nothing to undo.
      const egressPlan = await this.egress?.plan(podNamespace, podName, a.args['K8S_POD_UID']);
      const alloc = await this.ipam.allocate(pool);
      const key = `${a.containerId}/${a.ifname}`;
      if (this.attachments.has(key)) {
        await this.ipam.free(pool, alloc);
        throw new CniError(CniCode.Internal, 'container already has this interface', key);
      }
      const undo = new UndoStack();
      undo.push('free address', () => this.ipam.free(pool, alloc));
      try {
        const natCfg = egressPlan && this.egress!.configFor(egressPlan, alloc.ipv4, alloc.ipv6);
        const { result, info } = await this.podNetwork.setup({
          containerId: a.containerId,
          ifname: a.ifname,
          netns: a.netns,
          pool,
          ipv4: alloc.ipv4,
          ipv6: alloc.ipv6,
          podNamespace,
          podName,
        });
        undo.push('destroy pod network', () => this.podNetwork.destroy(info));
        if (natCfg && egressPlan) {
          // The NAT client may fail half-way: whatever it left in the pod's netns goes too.
          undo.push('remove egress NAT', () => this.egress!.remove(a.netns));
          await this.egress!.apply(a.netns, natCfg);
          this.egress!.register({
            containerId: a.containerId,
            ifname: a.ifname,
            podNamespace: podNamespace!,
            podName: podName!,
            hostIndex: info.hostIndex,
            ipv4: info.ipv4,
            ipv6: info.ipv6,
            netns: a.netns,
            egresses: egressPlan.map((e) => ({ namespace: e.namespace, name: e.name })),
          });
        }
        undo.commit();
        this.attachments.set(key, info);
        return result;
      } catch (err) {
        const failures = await undo.unwind();
        if (failures.length) this.log.warn('ADD rollback incomplete', { containerId: a.containerId, failures });
        throw err;
      }
    });
  }

  async del(a: CNIArgs): Promise<void> {
    this.notReady();
    await this.locks.run(a.containerId, async () => {
      const key = `${a.containerId}/${a.ifname}`;
      const p = this.attachments.get(key);
      this.egress?.unregister(a.containerId, a.ifname);
      if (!p) return;
      await this.podNetwork.destroy(p);
      this.attachments.delete(key);
      await this.ipam.free(p.pool, { ipv4: p.ipv4, ipv6: p.ipv6 });
    });
  }

  async check(a: CNIArgs): Promise<void> {
    this.notReady();
    await this.locks.run(a.containerId, async () => {
      const conf = parseNetConf(a.stdinData);
      const prev = optionalPrevResultOf(conf);
      const expected: { ipv4?: string; ipv6?: string } = {};
      for (const i of prev?.ips ?? []) {
        const addr = i.address.split('/')[0]!;
        if (addr.includes(':')) expected.ipv6 = addr;
        else expected.ipv4 = addr;
      }
      await this.podNetwork.check(a.containerId, a.ifname, a.netns, expected);
    });
  }

  /** GC: removes every pod whose attachment is not in cni.dev/valid-attachments; keeps going on errors. */
  async gc(a: CNIArgs): Promise<void> {
    this.notReady();
    const conf = parseNetConf(a.stdinData);
    const valid = new Set(validAttachments(conf).map((x) => `${x.containerID}/${x.ifname}`));
    const errors: string[] = [];
    const known = new Map(this.attachments);
    for (const p of await this.podNetwork.list()) known.set(`${p.containerId}/${p.ifname}`, p);
    for (const p of known.values()) {
      if (valid.has(`${p.containerId}/${p.ifname}`)) continue;
      try {
        await this.del({ ...a, containerId: p.containerId, ifname: p.ifname });
      } catch (err) {
        errors.push(`${p.containerId}/${p.ifname}: ${(err as Error).message}`);
      }
    }
    if (errors.length) throw new CniError(CniCode.IOFailure, 'gc: some attachments could not be removed', errors.join('; '));
  }

  /** The pods coild knows (tests, metrics). */
  pods(): PodInfo[] {
    return [...this.attachments.values()];
  }

  async status(): Promise<void> {
    if (!this.isReady()) throw new CniError(CniCode.NotAvailable, 'coild is not ready');
  }
}
