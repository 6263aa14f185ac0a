/**
 * coil.cybozu.com/v2 Egress (namespaced) and the built-in kinds coil-egress-controller makes from it
 * (Deployment, Service, PodDisruptionBudget), with the labels, annotations and environment names today's
 * Coil uses. Only the fields Coil reads or writes are typed; the rest pass through untouched.
 */
import { defineResource, type CustomObject, type KubeObject } from '@cnikit/kube';
import { GROUP, VERSION } from './types';

/** Pod annotation prefix: `egress.coil.cybozu.com/<egress namespace>: name1,name2`. */
export const ANNOTATION_EGRESS_PREFIX = 'egress.coil.cybozu.com/';
export const LABEL_APP_NAME = 'app.kubernetes.io/name';
export const LABEL_APP_COMPONENT = 'app.kubernetes.io/component';
export const LABEL_APP_INSTANCE = 'app.kubernetes.io/instance';
/** The main container of router pods: the user's template may customise it, the controller completes it. */
export const EGRESS_CONTAINER = 'egress';
/** ServiceAccount the router pods run as (bound to the coil-egress ClusterRole by config/rbac.yaml). */
export const EGRESS_SERVICE_ACCOUNT = 'coil-egress';
export const DEFAULT_FOU_PORT = 5555;
export const EGRESS_METRICS_PORT = 8080;
export const EGRESS_HEALTH_PORT = 8081;
/** Environment of the egress container (names as in Coil). */
export const ENV_POD_NAMESPACE = 'COIL_POD_NAMESPACE';
export const ENV_POD_NAME = 'COIL_POD_NAME';
export const ENV_EGRESS_NAME = 'COIL_EGRESS_NAME';
export const ENV_POD_ADDRESSES = 'COIL_POD_ADDRESSES';

export type IntOrString = number | string;

export interface EgressPodTemplate {
  metadata?: { labels?: Record<string, string>; annotations?: Record<string, string> };
  /** A core/v1 PodSpec, validated by the API server when the Deployment is written. */
  spec?: PodSpec;
}

export interface Container {
  name: string;
  image?: string;
  command?: string[];
  args?: string[];
  env?: EnvVar[];
  ports?: { name?: string; containerPort: number; protocol?: string }[];
  securityContext?: { capabilities?: { add?: string[]; drop?: string[] }; [k: string]: unknown };
  livenessProbe?: unknown;
  readinessProbe?: unknown;
  [k: string]: unknown;
}
export interface EnvVar {
  name: string;
  value?: string;
  valueFrom?: { fieldRef?: { fieldPath: string; apiVersion?: string }; [k: string]: unknown };
}
export interface PodSpec {
  containers?: Container[];
  serviceAccountName?: string;
  [k: string]: unknown;
}

export interface EgressSpec {
  destinations: string[];
  /** Defaulted to 1 by the CRD. */
  replicas?: number;
  strategy?: { type?: 'Recreate' | 'RollingUpdate'; rollingUpdate?: { maxSurge?: IntOrString; maxUnavailable?: IntOrString } };
  template?: EgressPodTemplate;
  /** Defaulted to ClientIP by the CRD (Service's own default is None). */
  sessionAffinity?: 'ClientIP' | 'None';
  sessionAffinityConfig?: { clientIP?: { timeoutSeconds?: number } };
  fouSourcePortAuto?: boolean;
  podDisruptionBudget?: { minAvailable?: IntOrString; maxUnavailable?: IntOrString };
}
export interface EgressStatus {
  /** The Deployment's status.replicas (what the scale subresource reports). */
  replicas?: number;
  /** Label selector of the router pods in string form (the scale subresource's selector, for HPA). */
  selector?: string;
}
export type Egress = CustomObject<EgressSpec, EgressStatus>;

export const Egresses = defineResource<Egress>({ group: GROUP, version: VERSION, kind: 'Egress', plural: 'egresses', namespaced: true });

export interface Deployment extends KubeObject {
  spec: {
    replicas?: number;
    selector: { matchLabels?: Record<string, string> };
    strategy?: unknown;
    template: { metadata?: { labels?: Record<string, string>; annotations?: Record<string, string> }; spec: PodSpec };
    [k: string]: unknown;
  };
  status?: { replicas?: number; readyReplicas?: number; availableReplicas?: number; [k: string]: unknown };
}
export const Deployments = defineResource<Deployment>({
  group: 'apps',
  version: 'v1',
  kind: 'Deployment',
  plural: 'deployments',
  namespaced: true,
});

export interface Service extends KubeObject {
  spec: {
    type?: string;
    selector?: Record<string, string>;
    ports?: { name?: string; port: number; targetPort?: IntOrString; protocol?: string }[];
    clusterIP?: string;
    clusterIPs?: string[];
    ipFamilyPolicy?: string;
    ipFamilies?: string[];
    sessionAffinity?: string;
    sessionAffinityConfig?: { clientIP?: { timeoutSeconds?: number } };
    [k: string]: unknown;
  };
}
export const Services = defineResource<Service>({ group: '', version: 'v1', kind: 'Service', plural: 'services', namespaced: true });

export interface PodDisruptionBudget extends KubeObject {
  spec: { minAvailable?: IntOrString; maxUnavailable?: IntOrString; selector?: { matchLabels?: Record<string, string> } };
}
export const PodDisruptionBudgets = defineResource<PodDisruptionBudget>({
  group: 'policy',
  version: 'v1',
  kind: 'PodDisruptionBudget',
  plural: 'poddisruptionbudgets',
  namespaced: true,
});

/** Labels of everything made for one Egress; also the Deployment's and the Service's selector. */
export function egressLabels(egressName: string): Record<string, string> {
  return { [LABEL_APP_NAME]: 'coil', [LABEL_APP_COMPONENT]: 'egress', [LABEL_APP_INSTANCE]: egressName };
}

/** The selector in string form (sorted keys, as a LabelSelector serialises). */
export function egressSelector(egressName: string): string {
  return Object.entries(egressLabels(egressName))
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([k, v]) => `${k}=${v}`)
    .join(',');
}

/** Every Egress a pod asks for: `egress.coil.cybozu.com/<ns>: a,b` -> [{namespace, name}], in a stable order. */
export function egressesOfPod(annotations: Record<string, string> | undefined): { namespace: string; name: string }[] {
  const out: { namespace: string; name: string }[] = [];
  for (const [k, v] of Object.entries(annotations ?? {})) {
    if (!k.startsWith(ANNOTATION_EGRESS_PREFIX)) continue;
    const namespace = k.slice(ANNOTATION_EGRESS_PREFIX.length);
    for (const name of v
      .split(',')
      .map((s) => s.trim())
      .filter(Boolean))
      out.push({ namespace, name });
  }
  return out.sort((a, b) => `${a.namespace}/${a.name}`.localeCompare(`${b.namespace}/${b.name}`));
}

export type ServiceAccount = KubeObject;
export const ServiceAccounts = defineResource<ServiceAccount>({
  group: '',
  version: 'v1',
  kind: 'ServiceAccount',
  plural: 'serviceaccounts',
  namespaced: true,
});

export interface RbacSubject {
  kind: string;
  name: string;
  namespace?: string;
  apiGroup?: string;
}
export interface ClusterRoleBinding extends KubeObject {
  roleRef: { apiGroup: string; kind: string; name: string };
  subjects?: RbacSubject[];
}
export const ClusterRoleBindings = defineResource<ClusterRoleBinding>({
  group: 'rbac.authorization.k8s.io',
  version: 'v1',
  kind: 'ClusterRoleBinding',
  plural: 'clusterrolebindings',
  namespaced: false,
});
/** ClusterRoleBinding (from config/rbac.yaml) whose subjects the controller keeps: coil-egress of every Egress namespace. */
export const EGRESS_CLUSTER_ROLE_BINDING = 'coil-egress';
