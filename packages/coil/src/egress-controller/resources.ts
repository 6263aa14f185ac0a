/**
 * The objects coil-egress-controller makes for one Egress, as pure functions of the Egress and the
 * controller's settings: a Deployment of router pods, a Service in front of them, a PodDisruptionBudget
 * when asked for. They are written with server-side apply, so a field dropped from here (or from the
 * Egress) is dropped from the object too, and fields other writers own (the Service's ClusterIP, the
 * defaults the API server fills in) are left alone.
 */
import { ownerReference } from '@cnikit/kube';
import {
  DEFAULT_FOU_PORT,
  EGRESS_CONTAINER,
  EGRESS_HEALTH_PORT,
  EGRESS_METRICS_PORT,
  EGRESS_SERVICE_ACCOUNT,
  ENV_EGRESS_NAME,
  ENV_POD_ADDRESSES,
  ENV_POD_NAME,
  ENV_POD_NAMESPACE,
  egressLabels,
  type Container,
  type Deployment,
  type Egress,
  type EnvVar,
  type PodDisruptionBudget,
  type Service,
} from '../api/egress';

export interface ChildOptions {
  /** Image of the egress container when the template names none. */
  image: string;
  /** FoU (UDP) port of the router pods and of the Service. */
  fouPort?: number;
}

function meta(eg: Egress): Deployment['metadata'] {
  return {
    name: eg.metadata.name!,
    namespace: eg.metadata.namespace!,
    labels: egressLabels(eg.metadata.name!),
    // The Egress controls its children: the garbage collector deletes them with it.
    ownerReferences: [ownerReference(eg, { controller: true, blockOwnerDeletion: true })],
  };
}

/** The egress container: the template's one (if any) completed with what coil-egress needs. */
export function egressContainer(eg: Egress, opts: ChildOptions, given?: Container): Container {
  const port = opts.fouPort ?? DEFAULT_FOU_PORT;
  const c: Container = { ...(given ?? {}), name: EGRESS_CONTAINER };
  if (!c.image) c.image = opts.image;
  if (!c.command?.length) c.command = ['coil-egress'];
  c.args = ['--fou-port', String(port)];
  const ours: EnvVar[] = [
    { name: ENV_POD_NAMESPACE, valueFrom: { fieldRef: { fieldPath: 'metadata.namespace' } } },
    { name: ENV_POD_NAME, valueFrom: { fieldRef: { fieldPath: 'metadata.name' } } },
    { name: ENV_EGRESS_NAME, value: eg.metadata.name! },
    { name: ENV_POD_ADDRESSES, valueFrom: { fieldRef: { fieldPath: 'status.podIPs' } } },
  ];
  const oursNames = new Set(ours.map((e) => e.name));
  c.env = [...(c.env ?? []).filter((e) => !oursNames.has(e.name)), ...ours];
  // coil-egress creates tunnels and NAT rules in its own netns: NET_ADMIN, whatever else the user set.
  const sc = { ...(c.securityContext ?? {}) };
  const caps = { ...(sc.capabilities ?? {}) };
  caps.add = [...new Set([...(caps.add ?? []), 'NET_ADMIN'])];
  sc.capabilities = caps;
  c.securityContext = sc;
  const ports = [
    { name: 'fou', containerPort: port, protocol: 'UDP' },
    { name: 'metrics', containerPort: EGRESS_METRICS_PORT, protocol: 'TCP' },
    { name: 'health', containerPort: EGRESS_HEALTH_PORT, protocol: 'TCP' },
  ];
  const taken = new Set(ports.map((p) => p.name));
  c.ports = [
    ...(c.ports ?? []).filter(
      (p) => !taken.has(p.name ?? '') && !ports.some((q) => q.containerPort === p.containerPort && q.protocol === (p.protocol ?? 'TCP')),
    ),
    ...ports,
  ];
  c.livenessProbe ??= { httpGet: { path: '/healthz', port: 'health' } };
  c.readinessProbe ??= { httpGet: { path: '/readyz', port: 'health' } };
  return c;
}

export function desiredDeployment(eg: Egress, opts: ChildOptions): Deployment {
  const name = eg.metadata.name!;
  const selector = egressLabels(name);
  const tpl = eg.spec.template ?? {};
  const podSpec = { ...(tpl.spec ?? {}) };
  const containers = podSpec.containers ?? [];
  const i = containers.findIndex((c) => c.name === EGRESS_CONTAINER);
  const main = egressContainer(eg, opts, i >= 0 ? containers[i] : undefined);
  podSpec.containers = i >= 0 ? containers.map((c, j) => (j === i ? main : c)) : [main, ...containers];
  podSpec.serviceAccountName ??= EGRESS_SERVICE_ACCOUNT;
  const template: Deployment['spec']['template'] = {
    // The selector labels win over the template's: the Deployment must select its own pods.
    metadata: { labels: { ...(tpl.metadata?.labels ?? {}), ...selector } },
    spec: podSpec,
  };
  if (tpl.metadata?.annotations && Object.keys(tpl.metadata.annotations).length)
    template.metadata!.annotations = { ...tpl.metadata.annotations };
  const spec: Deployment['spec'] = { replicas: eg.spec.replicas ?? 1, selector: { matchLabels: selector }, template };
  if (eg.spec.strategy) spec.strategy = eg.spec.strategy;
  return { apiVersion: 'apps/v1', kind: 'Deployment', metadata: meta(eg), spec };
}

export function desiredService(eg: Egress, opts: ChildOptions): Service {
  const port = opts.fouPort ?? DEFAULT_FOU_PORT;
  const spec: Service['spec'] = {
    type: 'ClusterIP',
    selector: egressLabels(eg.metadata.name!),
    ports: [{ name: 'fou', port, targetPort: port, protocol: 'UDP' }],
    // Clients of either family tunnel to the ClusterIP of their own family.
    ipFamilyPolicy: 'PreferDualStack',
    // Coil's default is ClientIP (the Service's own is None): a TCP flow must stay on one router.
    sessionAffinity: eg.spec.sessionAffinity ?? 'ClientIP',
  };
  if (spec.sessionAffinity === 'ClientIP' && eg.spec.sessionAffinityConfig) spec.sessionAffinityConfig = eg.spec.sessionAffinityConfig;
  return { apiVersion: 'v1', kind: 'Service', metadata: meta(eg), spec };
}

/** The PDB the Egress asks for, or undefined (none, or it is to be deleted). Neither bound given: maxUnavailable 1. */
export function desiredPdb(eg: Egress): PodDisruptionBudget | undefined {
  const p = eg.spec.podDisruptionBudget;
  if (!p) return undefined;
  const spec: PodDisruptionBudget['spec'] = { selector: { matchLabels: egressLabels(eg.metadata.name!) } };
  if (p.minAvailable !== undefined) spec.minAvailable = p.minAvailable;
  else spec.maxUnavailable = p.maxUnavailable ?? 1;
  return { apiVersion: 'policy/v1', kind: 'PodDisruptionBudget', metadata: meta(eg), spec };
}
