/**
 * coil-egress-controller's reconciler: for every Egress, a Deployment of router pods, a Service (UDP, the
 * FoU port) in front of them and, when spec.podDisruptionBudget is set, a PodDisruptionBudget; the Egress's
 * status.replicas follows the Deployment and status.selector names the router pods (the scale
 * subresource, so `kubectl scale` and HPA work). Router pods run as ServiceAccount coil-egress, which
 * rbac.ts creates per namespace and binds (see there).
 *
 * Children are written with server-side apply (field manager `coil-egress-controller`, forced: this
 * controller owns what it writes) and carry a controller ownerReference to the Egress, so the garbage
 * collector removes them with it. The reconciler also deletes children whose Egress is confirmed gone
 * (an API read, not the cache): kube-controller-manager learns a new CRD kind only on its discovery resync,
 * and orphans would otherwise keep routing until then.
 */
import {
  Controller,
  Informer,
  ResourceClient,
  byLabel,
  controllerOf,
  isBeingDeleted,
  isNotFound,
  traceLogger,
  type KubeMetrics,
  type KubeObject,
  type KubeTransport,
  type Logger,
} from '@cnikit/kube';
import {
  Deployments,
  Egresses,
  LABEL_APP_COMPONENT,
  LABEL_APP_INSTANCE,
  LABEL_APP_NAME,
  PodDisruptionBudgets,
  Services,
  egressSelector,
  type Deployment,
  type Egress,
  type PodDisruptionBudget,
  type Service,
} from '../api/egress';
import { EgressRbac } from './rbac';
import { desiredDeployment, desiredPdb, desiredService, type ChildOptions } from './resources';

export const FIELD_MANAGER = 'coil-egress-controller';
const CHILD_SELECTOR = `${LABEL_APP_NAME}=coil,${LABEL_APP_COMPONENT}=egress`;

export interface EgressControllerOptions extends ChildOptions {
  transport: KubeTransport;
  metrics?: KubeMetrics;
  workers?: number;
  logger?: Logger;
}

export class EgressController {
  readonly egresses: ResourceClient<Egress>;
  readonly deployments: ResourceClient<Deployment>;
  readonly services: ResourceClient<Service>;
  readonly pdbs: ResourceClient<PodDisruptionBudget>;
  readonly egressInformer: Informer<Egress>;
  readonly deploymentInformer: Informer<Deployment>;
  readonly serviceInformer: Informer<Service>;
  readonly pdbInformer: Informer<PodDisruptionBudget>;
  private readonly controller: Controller;
  private readonly rbacController: Controller;
  private readonly rbac: EgressRbac;
  private readonly log: Logger;

  constructor(private readonly opts: EgressControllerOptions) {
    const t = opts.transport;
    this.log = opts.logger ?? traceLogger('coil.egress-controller');
    this.egresses = new ResourceClient(t, Egresses);
    this.deployments = new ResourceClient(t, Deployments);
    this.services = new ResourceClient(t, Services);
    this.pdbs = new ResourceClient(t, PodDisruptionBudgets);
    const m = opts.metrics;
    // Children are watched by label only: the controller never caches the cluster's other Deployments.
    const childOpts = { labelSelector: CHILD_SELECTOR, metrics: m, indexers: { instance: byLabel(LABEL_APP_INSTANCE) } };
    this.egressInformer = new Informer(this.egresses, { metrics: m });
    this.deploymentInformer = new Informer(this.deployments, childOpts);
    this.serviceInformer = new Informer(this.services, childOpts);
    this.pdbInformer = new Informer(this.pdbs, childOpts);
    const ownerKey = (o: KubeObject): string[] => {
      const name = controllerOf(o)?.kind === 'Egress' ? controllerOf(o)!.name : o.metadata.labels?.[LABEL_APP_INSTANCE];
      return name && o.metadata.namespace ? [`${o.metadata.namespace}/${name}`] : [];
    };
    this.controller = new Controller({
      name: 'egress',
      workers: opts.workers ?? 2,
      metrics: m,
      logger: this.log,
      reconcile: (r) => this.reconcile(r.namespace!, r.name),
    })
      .watch(this.egressInformer)
      .watch(this.deploymentInformer, ownerKey)
      .watch(this.serviceInformer, ownerKey)
      .watch(this.pdbInformer, ownerKey);
    this.rbac = new EgressRbac(t, this.log);
    // One key: the binding's subjects are a function of every Egress's namespace.
    this.rbacController = new Controller({
      name: 'egress-rbac',
      metrics: m,
      logger: this.log,
      reconcile: () => this.reconcileBinding(),
    }).watch(this.egressInformer, () => ['coil-egress']);
  }

  async start(): Promise<void> {
    await this.controller.start();
    await this.rbacController.start();
  }

  async stop(): Promise<void> {
    await this.rbacController.stop();
    await this.controller.stop();
  }

  async reconcileBinding(): Promise<void> {
    await this.rbac.syncBinding(this.egressInformer.store.list().map((e) => e.metadata.namespace!));
  }

  synced(): boolean {
    return [this.egressInformer, this.deploymentInformer, this.serviceInformer, this.pdbInformer].every((i) => i.hasSynced());
  }

  async reconcile(namespace: string, name: string): Promise<void> {
    const eg = this.egressInformer.store.get(`${namespace}/${name}`);
    if (!eg) return this.collectOrphans(namespace, name);
    if (isBeingDeleted(eg)) return; // the garbage collector takes the children
    const apply = { fieldManager: FIELD_MANAGER, force: true, namespace };
    await this.rbac.ensureServiceAccount(namespace);
    const dep = await this.deployments.patch(name, desiredDeployment(eg, this.opts), 'apply', apply);
    await this.services.patch(name, desiredService(eg, this.opts), 'apply', apply);
    const pdb = desiredPdb(eg);
    if (pdb) await this.pdbs.patch(name, pdb, 'apply', apply);
    else if (this.ownedBy(this.pdbInformer.store.get(`${namespace}/${name}`), eg))
      await this.pdbs.delete(name, { namespace, ignoreNotFound: true });

    const status = { replicas: dep.status?.replicas ?? 0, selector: egressSelector(name) };
    if (eg.status?.replicas !== status.replicas || eg.status?.selector !== status.selector) {
      try {
        await this.egresses.patchStatus(name, { status }, 'merge', { namespace });
      } catch (err) {
        if (!isNotFound(err)) throw err;
      }
    }
  }

  private ownedBy(child: KubeObject | undefined, eg: Egress): boolean {
    return Boolean(child && controllerOf(child)?.uid === eg.metadata.uid);
  }

  /** Deletes the children of an Egress the API server confirms is gone (a lagging cache must not cost a live one its pods). */
  private async collectOrphans(namespace: string, name: string): Promise<void> {
    const key = `${namespace}/${name}`;
    const children: [ResourceClient<KubeObject>, KubeObject | undefined][] = [
      [this.deployments as unknown as ResourceClient<KubeObject>, this.deploymentInformer.store.get(key)],
      [this.services as unknown as ResourceClient<KubeObject>, this.serviceInformer.store.get(key)],
      [this.pdbs as unknown as ResourceClient<KubeObject>, this.pdbInformer.store.get(key)],
    ];
    if (!children.some(([, c]) => c && controllerOf(c)?.kind === 'Egress')) return;
    const live = await this.egresses.find(name, { namespace });
    for (const [client, child] of children) {
      const ref = child && controllerOf(child);
      if (!ref || ref.kind !== 'Egress' || (live && live.metadata.uid === ref.uid)) continue;
      this.log.info('deleting child of a deleted Egress', { kind: client.resource.kind, namespace, name });
      await client.delete(name, { namespace, ignoreNotFound: true, preconditions: { uid: child.metadata.uid! } });
    }
  }
}
