// Typed CRD client against the real API server: CRUD, patch types, status and scale subresources, and the
// sample CRD's CEL rules rejecting bad objects with the server's own messages.
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import {
  ApiError,
  ConfigMaps,
  ResourceClient,
  crdManifest,
  installCrd,
  isConflict,
  isInvalid,
  isNotFound,
  resourceFromCrd,
  type KubeTransport,
} from '@cnikit/kube';
import { transportFor, uniqueName } from '@cnikit/kube-testing';
import { rejectedWith } from '@cnikit/netlib-testing';
import { AddressPools, SAMPLE_CRD_FILE, cluster, sampleCrd, type AddressPool } from './support';

let transport: KubeTransport;
let pools: ResourceClient<AddressPool>;

beforeAll(async () => {
  transport = transportFor(cluster);
  await installCrd(transport, sampleCrd());
  pools = new ResourceClient(transport, AddressPools);
});
afterAll(() => transport.close());

const pool = (name: string, spec: Partial<AddressPool['spec']> = {}): AddressPool => ({
  metadata: { name, labels: { suite: 'client' } },
  spec: { cidr: '10.100.0.0/16', blockSizeBits: 5, ...spec },
});

const rejection = (p: Promise<unknown>): Promise<ApiError> => rejectedWith(ApiError, p);

describe('resource definitions and CRD manifests', () => {
  test('the YAML manifest and the TypeScript definition name the same resource', () => {
    const fromYaml = resourceFromCrd<AddressPool>(sampleCrd());
    expect(fromYaml).toEqual(AddressPools);
    expect(fromYaml.apiVersion).toBe('kit.cnikit.io/v1alpha1');
    expect(fromYaml.fullName).toBe('addresspools.kit.cnikit.io');
  });

  test('crdManifest builds an equivalent CRD from the definition and schema', () => {
    const yaml = sampleCrd();
    const v = yaml.spec.versions[0]!;
    const built = crdManifest(AddressPools, {
      schema: v.schema!.openAPIV3Schema,
      scale: v.subresources!.scale,
      printerColumns: v.additionalPrinterColumns,
    });
    expect(built.metadata.name).toBe(yaml.metadata.name);
    expect(built.spec.names).toEqual(yaml.spec.names);
    expect(built.spec.scope).toBe(yaml.spec.scope);
    expect(built.spec.versions[0]).toEqual(v);
  });

  test('kubectl applies the sample manifest to the test cluster', async () => {
    const { stdout } = await promisify(execFile)('kubectl', ['apply', '-f', SAMPLE_CRD_FILE], {
      env: { ...process.env, KUBECONFIG: cluster.kubeconfig },
    });
    expect(stdout).toMatch(/customresourcedefinition.apiextensions.k8s.io\/addresspools.kit.cnikit.io (unchanged|configured)/);
  });
});

describe('typed client', () => {
  test('create, get, list by label, update, delete', async () => {
    const name = uniqueName('crud');
    const created = await pools.create(pool(name));
    expect(created.metadata.uid).toBeTruthy();
    expect(created.apiVersion).toBe('kit.cnikit.io/v1alpha1');
    expect((await pools.get(name)).spec.cidr).toBe('10.100.0.0/16');

    const listed = await pools.list({ labelSelector: 'suite=client' });
    expect(listed.items.map((p) => p.metadata.name)).toContain(name);

    created.spec.blocks = ['10.100.0.0/27'];
    const updated = await pools.update(created);
    expect(updated.spec.blocks).toEqual(['10.100.0.0/27']);
    expect(Number(updated.metadata.generation)).toBe(2);

    // The stale copy (old resourceVersion) is refused: optimistic concurrency.
    const stale = await rejection(pools.update(created));
    expect(isConflict(stale)).toBe(true);
    expect(stale.status).toBe(409);

    expect(await pools.delete(name)).toBeUndefined();
    expect(isNotFound(await rejection(pools.get(name)))).toBe(true);
    expect(await pools.find(name)).toBeUndefined();
    expect(await pools.delete(name, { ignoreNotFound: true })).toBeUndefined();
  });

  test('merge, JSON and server-side apply patches', async () => {
    const name = uniqueName('patch');
    await pools.create(pool(name));
    const merged = await pools.patch(name, { metadata: { labels: { tier: 'gold' } }, spec: { blocks: ['a'] } }, 'merge');
    expect(merged.metadata.labels).toMatchObject({ suite: 'client', tier: 'gold' });
    const jsonPatched = await pools.patch(name, [{ op: 'add', path: '/spec/blocks/-', value: 'b' }], 'json');
    expect(jsonPatched.spec.blocks).toEqual(['a', 'b']);
    const applied = await pools.patch(
      name,
      {
        apiVersion: AddressPools.apiVersion,
        kind: AddressPools.kind,
        metadata: { name },
        spec: { replicas: 2 },
      },
      'apply',
      { fieldManager: 'kube-test', force: true },
    );
    expect(applied.spec.replicas).toBe(2);
    expect(applied.spec.blocks).toEqual(['a', 'b']);
    await pools.delete(name);
  });

  test('status subresource: status and spec are written separately', async () => {
    const name = uniqueName('status');
    const created = await pools.create({ ...pool(name), status: { allocatedBlocks: 99 } });
    // Status in a create is ignored when the status subresource is on.
    expect(created.status?.allocatedBlocks).toBeUndefined();

    const withStatus = await pools.updateStatus({ ...created, status: { allocatedBlocks: 3, observedGeneration: 1 } });
    expect(withStatus.status?.allocatedBlocks).toBe(3);
    expect(withStatus.metadata.generation).toBe(created.metadata.generation);

    // A main-resource update does not touch status, and a status update does not touch spec.
    const specChange = await pools.update({ ...withStatus, spec: { ...withStatus.spec, blocks: ['x'] }, status: { allocatedBlocks: 0 } });
    expect(specChange.status?.allocatedBlocks).toBe(3);
    const statusPatched = await pools.patchStatus(name, { status: { allocatedBlocks: 4 }, spec: { blocks: ['x', 'y'] } });
    expect(statusPatched.status?.allocatedBlocks).toBe(4);
    expect(statusPatched.spec.blocks).toEqual(['x']);
    expect((await pools.getStatus(name)).status?.allocatedBlocks).toBe(4);

    const viaRetry = await pools.updateWithRetry(
      name,
      (p) => {
        p.status = { ...p.status, conditions: [{ type: 'Ready', status: 'True', reason: 'Allocated' }] };
      },
      { subresource: 'status' },
    );
    expect(viaRetry.status?.conditions?.[0]?.type).toBe('Ready');
    await pools.delete(name);
  });

  test('scale subresource maps to spec.replicas and status.replicas', async () => {
    const name = uniqueName('scale');
    await pools.create(pool(name, { replicas: 1 }));
    await pools.patchStatus(name, { status: { replicas: 1, selector: 'app=allocator' } });
    const scale = await pools.getScale(name);
    expect(scale.kind).toBe('Scale');
    expect(scale.spec?.replicas).toBe(1);
    expect(scale.status).toEqual({ replicas: 1, selector: 'app=allocator' });

    await pools.scale(name, 4);
    expect((await pools.get(name)).spec.replicas).toBe(4);
    const s2 = await pools.getScale(name);
    const s3 = await pools.updateScale({ ...s2, spec: { replicas: 6 } });
    expect(s3.spec?.replicas).toBe(6);
    expect((await pools.get(name)).spec.replicas).toBe(6);
    await pools.delete(name);
  });

  test('namespaced built-in resources: a client bound to a namespace', async () => {
    const cms = new ResourceClient(transport, ConfigMaps, { namespace: 'default' });
    const name = uniqueName('cm');
    await cms.create({ metadata: { name }, data: { a: '1' } });
    expect((await cms.get(name)).metadata.namespace).toBe('default');
    expect(cms.path({ name })).toBe(`/api/v1/namespaces/default/configmaps/${name}`);
    expect(isNotFound(await rejection(cms.inNamespace('kube-system').get(name)))).toBe(true);
    const patched = await cms.patch(name, { data: { b: '2' } }, 'strategic');
    expect(patched.data).toEqual({ a: '1', b: '2' });
    // Dry run: validated by the server, not stored.
    await cms.create({ metadata: { name: `${name}-dry` } }, { dryRun: true });
    expect(await cms.find(`${name}-dry`)).toBeUndefined();
    await cms.delete(name);
  });
});

describe('CEL validation rules (x-kubernetes-validations) enforced by the API server', () => {
  test('cidr is immutable (self == oldSelf)', async () => {
    const name = uniqueName('cel-immutable');
    await pools.create(pool(name));
    const err = await rejection(pools.patch(name, { spec: { cidr: '10.200.0.0/16' } }));
    expect(isInvalid(err)).toBe(true);
    expect(err.status).toBe(422);
    expect(err.reason).toBe('Invalid');
    expect(err.message).toContain('cidr is immutable');
    expect(err.causes).toEqual([expect.objectContaining({ field: 'spec.cidr', message: expect.stringContaining('cidr is immutable') })]);
    const err2 = await rejection(pools.patch(name, { spec: { blockSizeBits: 6 } }));
    expect(err2.causes.map((c) => c.message)).toEqual([expect.stringContaining('blockSizeBits is immutable')]);
    // An unchanged cidr passes.
    await pools.patch(name, { spec: { cidr: '10.100.0.0/16', replicas: 1 } });
    await pools.delete(name);
  });

  test('blocks is append-only', async () => {
    const name = uniqueName('cel-append');
    await pools.create(pool(name, { blocks: ['b0', 'b1'] }));
    // Appending is allowed.
    await pools.patch(name, { spec: { blocks: ['b0', 'b1', 'b2'] } });
    for (const bad of [['b0', 'b2'], ['b1', 'b0', 'b2'], []]) {
      const err = await rejection(pools.patch(name, { spec: { blocks: bad } }));
      expect(err.status).toBe(422);
      expect(err.causes).toEqual([
        expect.objectContaining({ field: 'spec.blocks', message: expect.stringContaining('blocks is append-only') }),
      ]);
    }
    expect((await pools.get(name)).spec.blocks).toEqual(['b0', 'b1', 'b2']);
    await pools.delete(name);
  });

  test('a create with a malformed cidr is rejected by the isCIDR rule, with the server error', async () => {
    const err = await rejection(pools.create(pool(uniqueName('cel-cidr'), { cidr: '10.100.0.1/16' })));
    expect(err.status).toBe(422);
    expect(err.message).toMatch(/spec\.cidr.*cidr must be a network address in CIDR form/);
    // The structural schema itself (types, bounds) is enforced too.
    const err2 = await rejection(pools.create(pool(uniqueName('schema'), { blockSizeBits: 40 })));
    expect(err2.causes[0]).toMatchObject({ field: 'spec.blockSizeBits' });
  });
});

describe('raw requests', () => {
  test('requestRaw gives the status of every call: 201, 409 and 404 with the Status object, a non-JSON body as text', async () => {
    const name = uniqueName('raw');
    const path = '/api/v1/namespaces/default/configmaps';
    const cm = { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name }, data: { a: '1' } };
    const created = await transport.requestRaw<{ metadata: { name: string } }>('POST', path, { body: cm });
    expect(created.status).toBe(201);
    expect(created.body.metadata.name).toBe(name);
    expect(await transport.requestRaw('POST', path, { body: cm })).toMatchObject({ status: 409, body: { reason: 'AlreadyExists' } });
    expect(await transport.requestRaw('GET', `${path}/${name}-missing`)).toMatchObject({ status: 404, body: { reason: 'NotFound' } });
    // an API group the server does not serve: its mux answers in plain text
    expect(await transport.requestRaw('GET', '/apis/none.example.com/v1/things')).toEqual({
      status: 404,
      body: { text: expect.stringContaining('404 page not found') },
    });
    await transport.request('DELETE', `${path}/${name}`);
  });
});
