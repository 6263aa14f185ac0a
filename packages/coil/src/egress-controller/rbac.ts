/**
 * What router pods need to run in an Egress's namespace: the ServiceAccount `coil-egress` (shared by every
 * Egress of the namespace, so it has no owner and is left in place), and that account listed in the
 * ClusterRoleBinding `coil-egress` (config/rbac.yaml: read Pods and Egresses cluster-wide, as coil-egress
 * must see its client pods in every namespace). The binding's subjects are exactly the namespaces that have
 * an Egress, sorted; a binding that was not installed is left alone (the cluster's RBAC is the admin's).
 */
import { ResourceClient, isAlreadyExists, isNotFound, type KubeTransport, type Logger } from '@cnikit/kube';
import {
  ClusterRoleBindings,
  EGRESS_CLUSTER_ROLE_BINDING,
  EGRESS_SERVICE_ACCOUNT,
  LABEL_APP_COMPONENT,
  LABEL_APP_NAME,
  ServiceAccounts,
  type ClusterRoleBinding,
  type RbacSubject,
  type ServiceAccount,
} from '../api/egress';

export class EgressRbac {
  private readonly sas: ResourceClient<ServiceAccount>;
  private readonly crbs: ResourceClient<ClusterRoleBinding>;
  /** Namespaces whose ServiceAccount is known to exist (one GET per namespace and process, not per reconcile). */
  private readonly haveSa = new Set<string>();

  constructor(
    transport: KubeTransport,
    private readonly log: Logger,
  ) {
    this.sas = new ResourceClient(transport, ServiceAccounts);
    this.crbs = new ResourceClient(transport, ClusterRoleBindings);
  }

  async ensureServiceAccount(namespace: string): Promise<void> {
    if (this.haveSa.has(namespace)) return;
    if (!(await this.sas.find(EGRESS_SERVICE_ACCOUNT, { namespace }))) {
      try {
        await this.sas.create({
          metadata: { name: EGRESS_SERVICE_ACCOUNT, namespace, labels: { [LABEL_APP_NAME]: 'coil', [LABEL_APP_COMPONENT]: 'egress' } },
        });
        this.log.info('service account created', { namespace, name: EGRESS_SERVICE_ACCOUNT });
      } catch (err) {
        if (!isAlreadyExists(err)) throw err;
      }
    }
    this.haveSa.add(namespace);
  }

  /** Sets the binding's subjects to coil-egress of each namespace (no write when already so). */
  async syncBinding(namespaces: Iterable<string>): Promise<void> {
    const subjects: RbacSubject[] = [...new Set(namespaces)]
      .sort()
      .map((namespace) => ({ kind: 'ServiceAccount', name: EGRESS_SERVICE_ACCOUNT, namespace }));
    try {
      await this.crbs.updateWithRetry(EGRESS_CLUSTER_ROLE_BINDING, (crb) => {
        const now = (crb.subjects ?? []).map((s) => ({ kind: s.kind, name: s.name, namespace: s.namespace }));
        if (JSON.stringify(now) === JSON.stringify(subjects)) return false;
        crb.subjects = subjects;
        return crb;
      });
    } catch (err) {
      if (!isNotFound(err)) throw err;
      this.log.warn(
        `ClusterRoleBinding ${EGRESS_CLUSTER_ROLE_BINDING} not found: router pods cannot read pods and egresses (apply config/rbac.yaml)`,
      );
    }
  }
}
