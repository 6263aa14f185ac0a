/**
 * Egress CRD (defaults, CEL validation, scale subresource) and coil-egress-controller against a real
 * kube-apiserver (+ the garbage collector).
 */
import * as fs from 'node:fs';
import * as http from 'node:http';
import * as path from 'node:path';
import {
  ApiError,
  HealthServer,
  KubeMetrics,
  Namespaces,
  ResourceClient,
  defineResource,
  isAlreadyExists,
  isInvalid,
  parseManifests,
  type KubeObject,
  type KubeTransport,
  type LeaderRunner,
} from '@cnikit/kube';
import { Registry } from '@cnikit/kube/prom';
import {
  ClusterRoleBindings,
  Deployments,
  Egresses,
  PodDisruptionBudgets,
  ServiceAccounts,
  Services,
  egressSelector,
  type Egress,
  type EgressSpec,
} from '../src/api/egress';
import { EgressController } from '../src/egress-controller/egress-controller';
import { eventually, installCoilCrds, testRunner, transport, uname } from './support';

jest.setTimeout(90_000);

let t: KubeTransport;
let egresses: ResourceClient<Egress>;
const ns = uname('egctl');

beforeAll(async () => {
  t = transport();
  await installCoilCrds(t);
  await new ResourceClient(t, Namespaces).create({ metadata: { name: ns } });
  egresses = new ResourceClient(t, Egresses, { namespace: ns });
});

const egress = (name: string, spec: Partial<EgressSpec>): Egress => ({
  metadata: { name, namespace: ns },
  spec: { destinations: ['0.0.0.0/0'], ...spec },
});

describe('Egress CRD', () => {
  it.each([
    ['no destinations', { destinations: [] }, 'spec.destinations'],
    ['a non-CIDR destination', { destinations: ['10.0.0.1'] }, 'spec.destinations[0]'],
    ['host bits set', { destinations: ['0.0.0.0/0', '10.1.2.3/8'] }, 'spec.destinations[1]'],
    ['bad IPv6 CIDR', { destinations: ['fd00::/129'] }, 'spec.destinations[0]'],
    ['negative replicas', { replicas: -1 }, 'spec.replicas'],
    ['unknown sessionAffinity', { sessionAffinity: 'Sticky' }, 'spec.sessionAffinity'],
    ['both PDB bounds', { podDisruptionBudget: { minAvailable: 1, maxUnavailable: 1 } }, 'spec.podDisruptionBudget'],
    ['PDB percentage above 100', { podDisruptionBudget: { maxUnavailable: '150%' } }, 'spec.podDisruptionBudget.maxUnavailable'],
    ['negative PDB bound', { podDisruptionBudget: { minAvailable: -1 } }, 'spec.podDisruptionBudget.minAvailable'],
    ['unknown strategy', { strategy: { type: 'BlueGreen' } }, 'spec.strategy.type'],
    [
      'affinity timeout too long',
      { sessionAffinityConfig: { clientIP: { timeoutSeconds: 100000 } } },
      'spec.sessionAffinityConfig.clientIP.timeoutSeconds',
    ],
  ])('rejects %s', async (_what, spec, field) => {
    const err = await egresses.create(egress(uname('bad'), spec as Partial<EgressSpec>)).catch((e: unknown) => e);
    expect(isInvalid(err)).toBe(true);
    expect((err as ApiError).causes.map((c) => c.field)).toContain(field);
  });

  it('defaults replicas and sessionAffinity; the scale subresource sets spec.replicas', async () => {
    const name = uname('def');
    const e = await egresses.create(
      egress(name, { destinations: ['0.0.0.0/0', '2001:db8::/32'], podDisruptionBudget: { maxUnavailable: '50%' } }),
    );
    expect(e.spec.replicas).toBe(1);
    expect(e.spec.sessionAffinity).toBe('ClientIP');
    const scale = await egresses.scale(name, 3);
    expect(scale.spec?.replicas).toBe(3);
    expect((await egresses.get(name)).spec.replicas).toBe(3);
    await egresses.delete(name);
  });
});

describe('coil-egress-controller', () => {
  let ctl: EgressController;
  let registry: Registry;
  let server: HealthServer;
  beforeAll(async () => {
    registry = new Registry();
    ctl = new EgressController({ transport: t, metrics: new KubeMetrics({ registry }), image: 'cnikit/coil:test', fouPort: 5555 });
    await ctl.start();
    server = await new HealthServer({ registry }).addReadyCheck('informers', () => ctl.synced()).listen();
  });
  afterAll(async () => {
    await server?.close();
    await ctl?.stop();
  });

  it('creates, updates and deletes the Deployment, Service and PDB; status follows the Deployment', async () => {
    const dep = new ResourceClient(t, Deployments, { namespace: ns });
    const svc = new ResourceClient(t, Services, { namespace: ns });
    const pdb = new ResourceClient(t, PodDisruptionBudgets, { namespace: ns });
    const name = uname('eg');
    const e = await egresses.create(
      egress(name, {
        replicas: 2,
        strategy: { type: 'Recreate' },
        sessionAffinityConfig: { clientIP: { timeoutSeconds: 43200 } },
        template: {
          metadata: { labels: { name: 'coil-egress' }, annotations: { foo: 'bar' } },
          spec: {
            affinity: {
              podAntiAffinity: {
                preferredDuringSchedulingIgnoredDuringExecution: [
                  {
                    weight: 1,
                    podAffinityTerm: { labelSelector: { matchLabels: { name: 'coil-egress' } }, topologyKey: 'kubernetes.io/hostname' },
                  },
                ],
              },
            },
            containers: [
              { name: 'egress', env: [{ name: 'EXTRA', value: '1' }], resources: { requests: { cpu: '10m' } } },
              { name: 'sidecar', image: 'busybox' },
            ],
          },
        },
        podDisruptionBudget: { minAvailable: 1 },
      }),
    );

    const d = await eventually('deployment', () => dep.find(name));
    expect(d.metadata.labels).toEqual({
      'app.kubernetes.io/name': 'coil',
      'app.kubernetes.io/component': 'egress',
      'app.kubernetes.io/instance': name,
    });
    expect(d.metadata.ownerReferences).toEqual([
      expect.objectContaining({ kind: 'Egress', name, uid: e.metadata.uid, controller: true, blockOwnerDeletion: true }),
    ]);
    expect(d.spec.replicas).toBe(2);
    expect(d.spec.strategy).toMatchObject({ type: 'Recreate' });
    expect(d.spec.template.metadata?.labels).toMatchObject({ name: 'coil-egress', 'app.kubernetes.io/instance': name });
    expect(d.spec.template.metadata?.annotations).toEqual({ foo: 'bar' });
    expect(d.spec.template.spec['affinity']).toBeDefined();
    expect(d.spec.template.spec.serviceAccountName).toBe('coil-egress');
    const [main, side] = d.spec.template.spec.containers!;
    expect(side?.name).toBe('sidecar');
    expect(main).toMatchObject({
      name: 'egress',
      image: 'cnikit/coil:test',
      command: ['coil-egress'],
      args: ['--fou-port', '5555'],
      resources: { requests: { cpu: '10m' } },
    });
    expect(main!.securityContext?.capabilities?.add).toEqual(['NET_ADMIN']);
    const env = Object.fromEntries((main!.env ?? []).map((v) => [v.name, v.value ?? v.valueFrom?.fieldRef?.fieldPath]));
    expect(env).toEqual({
      EXTRA: '1',
      COIL_POD_NAMESPACE: 'metadata.namespace',
      COIL_POD_NAME: 'metadata.name',
      COIL_EGRESS_NAME: name,
      COIL_POD_ADDRESSES: 'status.podIPs',
    });
    expect(main!.ports).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ name: 'fou', containerPort: 5555, protocol: 'UDP' }),
        expect.objectContaining({ name: 'metrics', containerPort: 8080 }),
        expect.objectContaining({ name: 'health', containerPort: 8081 }),
      ]),
    );
    expect(main!.livenessProbe).toMatchObject({ httpGet: { path: '/healthz', port: 'health' } });

    const s = await eventually('service', () => svc.find(name));
    expect(s.spec).toMatchObject({
      type: 'ClusterIP',
      selector: d.spec.selector.matchLabels,
      ipFamilyPolicy: 'PreferDualStack',
      sessionAffinity: 'ClientIP',
      sessionAffinityConfig: { clientIP: { timeoutSeconds: 43200 } },
    });
    expect(s.spec.ports).toEqual([expect.objectContaining({ port: 5555, protocol: 'UDP', targetPort: 5555 })]);
    expect(s.spec.clusterIP).toMatch(/^10\.0\.0\./);
    const p = await eventually('pdb', () => pdb.find(name));
    expect(p.spec).toMatchObject({ minAvailable: 1, selector: { matchLabels: d.spec.selector.matchLabels } });

    // status: the selector at once, replicas from the Deployment's status (no deployment controller here: set it).
    await eventually('status.selector', async () => (await egresses.get(name)).status?.selector === egressSelector(name));
    await dep.patchStatus(name, { status: { replicas: 2, readyReplicas: 2 } });
    await eventually('status.replicas', async () => (await egresses.get(name)).status?.replicas === 2);
    const scale = await egresses.getScale(name);
    expect(scale.status).toEqual({ replicas: 2, selector: egressSelector(name) });

    // Edits: scale, session affinity off, PDB switched to maxUnavailable, then removed; template change.
    await egresses.scale(name, 4);
    await eventually('deployment scaled', async () => (await dep.get(name)).spec.replicas === 4);
    await egresses.patch(name, {
      spec: { sessionAffinity: 'None', sessionAffinityConfig: null, podDisruptionBudget: { minAvailable: null, maxUnavailable: '25%' } },
    });
    await eventually('service affinity None', async () => (await svc.get(name)).spec.sessionAffinity === 'None');
    await eventually('pdb maxUnavailable', async () => {
      const x = await pdb.get(name);
      return x.spec.maxUnavailable === '25%' && x.spec.minAvailable === undefined;
    });
    await egresses.patch(name, { spec: { podDisruptionBudget: null, template: { metadata: { annotations: { foo: 'baz' } } } } });
    await eventually('pdb deleted', async () => !(await pdb.find(name)));
    await eventually('template annotation', async () => (await dep.get(name)).spec.template.metadata?.annotations?.['foo'] === 'baz');

    // Someone edits the Deployment by hand: the controller puts it back.
    await dep.patch(name, { spec: { replicas: 9 } });
    await eventually('deployment restored', async () => (await dep.get(name)).spec.replicas === 4);

    // Deleting the Egress removes its children.
    await egresses.delete(name);
    await eventually('deployment gone', async () => !(await dep.find(name)), 60_000);
    await eventually('service gone', async () => !(await svc.find(name)), 60_000);

    const text = await new Promise<string>((resolve, reject) => {
      http
        .get(`${server.url}/metrics`, (res) => {
          let body = '';
          res.on('data', (c: Buffer) => (body += c.toString()));
          res.on('end', () => resolve(body));
        })
        .on('error', reject);
    });
    expect(text).toMatch(/controller_runtime_reconcile_total\{controller="egress",result="success"\} [1-9]/);
    expect(text).toContain('workqueue_adds_total{name="egress"}');
  });

  it('the garbage collector removes the children when the controller is not running', async () => {
    const dep = new ResourceClient(t, Deployments, { namespace: ns });
    const name = uname('gc');
    await egresses.create(egress(name, {}));
    await eventually('deployment', () => dep.find(name));
    await ctl.stop();
    try {
      await egresses.delete(name);
      // kube-controller-manager's GC (it learns the Egress kind on its discovery resync: up to ~30 s).
      await eventually('deployment collected', async () => !(await dep.find(name)), 75_000, 500);
    } finally {
      ctl = new EgressController({ transport: t, metrics: new KubeMetrics({ registry: new Registry() }), image: 'cnikit/coil:test' });
      await ctl.start();
    }
  });
});

describe('RBAC for router pods', () => {
  it('config/rbac.yaml is accepted; the ServiceAccount is created and the binding lists every Egress namespace', async () => {
    const kinds: Record<string, ReturnType<typeof defineResource>> = {
      ServiceAccount: ServiceAccounts,
      ClusterRoleBinding: ClusterRoleBindings,
      ClusterRole: defineResource({
        group: 'rbac.authorization.k8s.io',
        version: 'v1',
        kind: 'ClusterRole',
        plural: 'clusterroles',
        namespaced: false,
      }),
    };
    for (const doc of parseManifests(fs.readFileSync(path.join(__dirname, '../config/rbac.yaml'), 'utf8'))) {
      await new ResourceClient<KubeObject>(t, kinds[doc.kind!]!).create(doc).catch((err: unknown) => {
        if (!isAlreadyExists(err)) throw err;
      });
    }
    const other = uname('egrbac');
    await new ResourceClient(t, Namespaces).create({ metadata: { name: other } });
    const ctl = new EgressController({ transport: t, image: 'cnikit/coil:test' });
    await ctl.start();
    try {
      await new ResourceClient(t, Egresses, { namespace: other }).create({
        metadata: { name: 'x', namespace: other },
        spec: { destinations: ['0.0.0.0/0'] },
      });
      await egresses.create(egress(uname('rb'), {}));
      await eventually('service account', () => new ResourceClient(t, ServiceAccounts).find('coil-egress', { namespace: other }));
      const crbs = new ResourceClient(t, ClusterRoleBindings);
      await eventually('binding subjects', async () => {
        const subjects = (await crbs.get('coil-egress')).subjects ?? [];
        return [ns, other].every((n) => subjects.some((s) => s.kind === 'ServiceAccount' && s.name === 'coil-egress' && s.namespace === n));
      });
      await new ResourceClient(t, Egresses, { namespace: other }).delete('x');
      await eventually(
        'namespace dropped from the binding',
        async () => !((await crbs.get('coil-egress')).subjects ?? []).some((s) => s.namespace === other),
      );
    } finally {
      await ctl.stop();
    }
  });
});

describe('leader election', () => {
  it('only the leader reconciles; a standby takes over when the leader stops', async () => {
    const lease = uname('coil-egress-leader');
    const make = (id: string): { ctl: EgressController; runner: LeaderRunner } => {
      const c = new EgressController({ transport: t, image: `img-${id}` });
      const runner = testRunner(c, t, lease, id, () => {
        throw new Error(`${id} lost the lease`);
      });
      return { ctl: c, runner };
    };
    const a = make('a');
    const b = make('b');
    void a.runner.run();
    await eventually('a leads', () => a.runner.isLeader());
    void b.runner.run();
    const dep = new ResourceClient(t, Deployments, { namespace: ns });
    const n1 = uname('le');
    await egresses.create(egress(n1, {}));
    const d1 = await eventually('deployment by a', () => dep.find(n1));
    expect(d1.spec.template.spec.containers![0]!.image).toBe('img-a');
    expect(b.runner.isLeader()).toBe(false);
    await a.runner.stop();
    await eventually('b leads', () => b.runner.isLeader(), 20_000);
    const n2 = uname('le');
    await egresses.create(egress(n2, {}));
    const d2 = await eventually('deployment by b', () => dep.find(n2));
    expect(d2.spec.template.spec.containers![0]!.image).toBe('img-b');
    await b.runner.stop();
  });
});
