// The controller runtime against the real API server: reconcile with per-key retries, finalizers holding
// deletion until removed, and ownerReference cascades carried out by kube-controller-manager's garbage collector.
import {
  ConfigMaps,
  Controller,
  Informer,
  KubeMetrics,
  ResourceClient,
  Secrets,
  addFinalizer,
  controllerOf,
  hasFinalizer,
  installCrd,
  isBeingDeleted,
  isNotFound,
  objectKey,
  ownerKeyMapper,
  removeFinalizer,
  setControllerReference,
  type ConfigMap,
  type KubeTransport,
  type Secret,
} from '@cnikit/kube';
import { transportFor, uniqueName } from '@cnikit/kube-testing';
import { AddressPools, cluster, eventually, sampleCrd, type AddressPool } from './support';

const FINALIZER = 'kit.cnikit.io/release-blocks';

let transport: KubeTransport;
beforeAll(async () => {
  transport = transportFor(cluster);
  await installCrd(transport, sampleCrd());
});
afterAll(() => transport.close());

describe('reconcile loop with finalizers', () => {
  const label = uniqueName('ctl');
  let pools: ResourceClient<AddressPool>;
  let controller: Controller;
  let informer: Informer<AddressPool>;
  const metrics = new KubeMetrics();
  const releasable = new Set<string>();
  const failFirst = new Map<string, number>();
  const attempts = new Map<string, number[]>();

  beforeAll(async () => {
    pools = new ResourceClient(transport, AddressPools);
    informer = new Informer(pools, { labelSelector: `test=${label}`, metrics });
    controller = new Controller({
      name: 'addresspool',
      metrics,
      workers: 2,
      reconcile: async ({ key, retries }) => {
        attempts.set(key, [...(attempts.get(key) ?? []), Date.now()]);
        const cached = informer.store.get(key);
        if (!cached) return;
        const left = failFirst.get(key) ?? 0;
        if (left > 0) {
          failFirst.set(key, left - 1);
          throw new Error(`injected failure (retries so far ${retries})`);
        }
        if (isBeingDeleted(cached)) {
          // Cleanup of external state would happen here; the test decides when it is done.
          if (!releasable.has(key)) return { requeueAfterMs: 200 };
          await removeFinalizer(pools, cached, FINALIZER);
          return;
        }
        const withFinalizer = await addFinalizer(pools, cached, FINALIZER);
        const blocks = withFinalizer.spec.blocks?.length ?? 0;
        if (
          withFinalizer.status?.allocatedBlocks !== blocks ||
          withFinalizer.status?.observedGeneration !== withFinalizer.metadata.generation
        ) {
          await pools.updateWithRetry(
            key,
            (p) => {
              p.status = { ...p.status, allocatedBlocks: p.spec.blocks?.length ?? 0, observedGeneration: p.metadata.generation };
            },
            { subresource: 'status' },
          );
        }
        return;
      },
    });
    controller.watch(informer);
    await controller.start();
  });
  afterAll(async () => {
    await controller.stop();
    for (const p of informer.store.list()) {
      await removeFinalizer(pools, p, FINALIZER);
      await pools.delete(p.metadata.name!, { ignoreNotFound: true });
    }
  });

  test('reconciles new and changed objects into status', async () => {
    const name = uniqueName('pool');
    await pools.create({ metadata: { name, labels: { test: label } }, spec: { cidr: '10.10.0.0/16', blockSizeBits: 4, blocks: ['a'] } });
    const done = await eventually('status set', async () => {
      const p = await pools.get(name);
      return hasFinalizer(p, FINALIZER) && p.status?.allocatedBlocks === 1 ? p : undefined;
    });
    expect(done.metadata.finalizers).toEqual([FINALIZER]);
    await pools.patch(name, { spec: { blocks: ['a', 'b', 'c'] } });
    await eventually('status follows spec', async () => (await pools.get(name)).status?.allocatedBlocks === 3);
  });

  test('finalizers hold deletion until the controller removes them', async () => {
    const name = uniqueName('fin');
    await pools.create({ metadata: { name, labels: { test: label } }, spec: { cidr: '10.11.0.0/16', blockSizeBits: 4 } });
    await eventually('finalizer added', async () => hasFinalizer(await pools.get(name), FINALIZER));

    const deleting = await pools.delete(name);
    expect(deleting?.metadata.deletionTimestamp).toBeTruthy();
    // Held: the object stays, marked for deletion, while the finalizer is there.
    await new Promise((r) => setTimeout(r, 1500));
    const held = await pools.get(name);
    expect(isBeingDeleted(held)).toBe(true);
    expect(held.metadata.finalizers).toEqual([FINALIZER]);
    // Writes that would add finalizers to a deleting object are refused by the helper.
    await expect(addFinalizer(pools, { ...held, metadata: { ...held.metadata, finalizers: [] } }, 'other/x')).rejects.toThrow(
      /being deleted/,
    );

    releasable.add(name);
    await eventually('deleted once released', async () => (await pools.find(name)) === undefined);
  });

  test('a failing reconcile is retried per key with growing delays, then succeeds', async () => {
    const name = uniqueName('retry');
    failFirst.set(name, 4);
    await pools.create({ metadata: { name, labels: { test: label } }, spec: { cidr: '10.12.0.0/16', blockSizeBits: 4 } });
    await eventually('reconciled after failures', async () => (await pools.get(name)).status?.allocatedBlocks === 0, 20_000);
    const times = attempts.get(name)!;
    expect(times.length).toBeGreaterThanOrEqual(5);
    const gaps = times.slice(1, 5).map((t, i) => t - times[i]!);
    // 5, 10, 20, 40 ms: each wait at least the limiter's delay, and the last longer than the first.
    expect(gaps[3]!).toBeGreaterThanOrEqual(38);
    expect(gaps[3]!).toBeGreaterThan(gaps[0]!);
    const text = await metrics.registry.metrics();
    expect(text).toMatch(/controller_runtime_reconcile_errors_total\{controller="addresspool"\} [4-9]/);
    expect(text).toMatch(/controller_runtime_reconcile_total\{controller="addresspool",result="success"\} \d+/);
    // The status write the wait above saw happens inside the reconcile; the queue forgets the key's failures
    // when the reconcile returns, a moment later.
    await eventually('failures forgotten after the success', async () => controller.queue.retries(name) === 0);
  });
});

describe('ownerReferences and the garbage collector', () => {
  let cms: ResourceClient<ConfigMap>;
  let secrets: ResourceClient<Secret>;
  beforeAll(() => {
    cms = new ResourceClient(transport, ConfigMaps, { namespace: 'default' });
    secrets = new ResourceClient(transport, Secrets, { namespace: 'default' });
  });

  async function family(tag: string) {
    const owner = await cms.create({ metadata: { name: uniqueName(`${tag}-owner`) } });
    const dep1 = await cms.create(setControllerReference(owner, { metadata: { name: uniqueName(`${tag}-dep`) }, data: { x: '1' } }));
    const dep2 = await secrets.create(
      setControllerReference(owner, { metadata: { name: uniqueName(`${tag}-sec`) }, stringData: { k: 'v' } }),
    );
    expect(controllerOf(dep1)).toMatchObject({
      kind: 'ConfigMap',
      name: owner.metadata.name,
      uid: owner.metadata.uid,
      controller: true,
      blockOwnerDeletion: true,
    });
    return { owner, dep1, dep2 };
  }

  test('background cascade: deleting the owner deletes its dependents', async () => {
    const { owner, dep1, dep2 } = await family('bg');
    await cms.delete(owner.metadata.name!, { propagationPolicy: 'Background' });
    await eventually(
      'dependents collected',
      async () => (await cms.find(dep1.metadata.name!)) === undefined && (await secrets.find(dep2.metadata.name!)) === undefined,
      30_000,
      200,
    );
  });

  test('foreground cascade: the owner stays until its dependents are gone', async () => {
    const { owner, dep1, dep2 } = await family('fg');
    // A finalizer on one dependent keeps it (and so the owner) around until the test removes it.
    await addFinalizer(cms, dep1, 'kit.cnikit.io/hold');
    const deleting = await cms.delete(owner.metadata.name!, { propagationPolicy: 'Foreground' });
    expect(deleting?.metadata.finalizers).toContain('foregroundDeletion');
    await eventually('secret dependent collected', async () => (await secrets.find(dep2.metadata.name!)) === undefined, 30_000, 200);
    const stillOwner = await cms.get(owner.metadata.name!);
    expect(isBeingDeleted(stillOwner)).toBe(true);
    const held = await cms.get(dep1.metadata.name!);
    expect(isBeingDeleted(held)).toBe(true);
    await removeFinalizer(cms, held, 'kit.cnikit.io/hold');
    await eventually('owner deleted after dependents', async () => (await cms.find(owner.metadata.name!)) === undefined, 30_000, 200);
  });

  test('orphan: dependents survive without the ownerReference', async () => {
    const { owner, dep1 } = await family('orphan');
    await cms.delete(owner.metadata.name!, { propagationPolicy: 'Orphan' });
    const orphaned = await eventually(
      'owner gone, reference removed',
      async () => {
        if (await cms.find(owner.metadata.name!)) return undefined;
        const d = await cms.get(dep1.metadata.name!);
        return (d.metadata.ownerReferences ?? []).length === 0 ? d : undefined;
      },
      30_000,
      200,
    );
    expect(orphaned.data).toEqual({ x: '1' });
    await cms.delete(dep1.metadata.name!);
  });

  test('ownerKeyMapper routes dependent events to the owner key', () => {
    const owner = { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'o', namespace: 'ns', uid: 'u1' } };
    const dep = setControllerReference(owner, { metadata: { name: 'd', namespace: 'ns' } });
    expect(ownerKeyMapper('ConfigMap')(dep)).toEqual(['ns/o']);
    expect(ownerKeyMapper('Other')(dep)).toEqual([]);
    expect(objectKey(dep)).toBe('ns/d');
    expect(() => setControllerReference({ ...owner, metadata: { ...owner.metadata, uid: 'u2' } }, dep)).toThrow(/already controlled/);
    expect(isNotFound(new Error('x'))).toBe(false);
  });
});
