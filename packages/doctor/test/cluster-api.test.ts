// doctor cluster against a real API server with Coil's and gcp-ipam's CRDs as their manifests install them:
// what it reads (a block of a gone node, an allocation of a gone pod) and its one write (the block deleted,
// Coil's finalizer removed).
import * as fs from 'node:fs';
import * as path from 'node:path';
import { loadAll } from 'js-yaml';
import {
  CustomResourceDefinitions,
  defineResource,
  installCrd,
  Nodes,
  Pods,
  ResourceClient,
  type CustomResourceDefinition,
  type KubeObject,
} from '@cnikit/kube';
import { testCluster, transportFor } from '@cnikit/kube-testing';
import { judgeCluster } from '../src/cluster';
import { deleteBlocks, readCluster } from '../src/cluster-api';

const info = testCluster();
const transport = transportFor(info);
const ROOT = path.join(__dirname, '..', '..', '..');
const crdsOf = (file: string): CustomResourceDefinition[] =>
  (loadAll(fs.readFileSync(path.join(ROOT, file), 'utf8')) as CustomResourceDefinition[]).filter(
    (d) => d?.kind === 'CustomResourceDefinition',
  );
const custom = (group: string, version: string, kind: string, plural: string) =>
  new ResourceClient(transport, defineResource<KubeObject & Record<string, unknown>>({ group, version, kind, plural, namespaced: false }));

afterAll(() => transport.close());

test('no Coil and no gcp-ipam in the cluster: said, nothing leaked', async () => {
  const r = judgeCluster(await readCluster(info.kubeconfig));
  expect(r).toMatchObject({ coil: false, gcpIpam: false, pools: [], leakedBlocks: [], leakedAllocations: [] });
});

test("a block of a gone node and an allocation of a gone pod are found; --gc's write deletes the block, finalizer and all", async () => {
  for (const d of [...crdsOf('packages/coil/config/crds.yaml'), ...crdsOf('packages/gcp-ipam/config/crds.yaml')])
    await installCrd(transport, d);
  expect((await new ResourceClient(transport, CustomResourceDefinitions).list()).items.length).toBeGreaterThanOrEqual(6);
  await new ResourceClient(transport, Nodes).create({ metadata: { name: 'kl-a' } });
  const pod = await new ResourceClient(transport, Pods).create({
    metadata: { name: 'a', namespace: 'default' },
    spec: { nodeName: 'kl-a', containers: [{ name: 'c', image: 'busybox' }] },
  });
  const pools = custom('coil.cybozu.com', 'v2', 'AddressPool', 'addresspools');
  const blocks = custom('coil.cybozu.com', 'v2', 'AddressBlock', 'addressblocks');
  await pools.create({ metadata: { name: 'default' }, spec: { blockSizeBits: 5, subnets: [{ ipv4: '10.100.0.0/16' }] } });
  const block = (index: number, node: string) => ({
    metadata: {
      name: `default-${index}`,
      labels: { 'coil.cybozu.com/pool': 'default', 'coil.cybozu.com/node': node },
      finalizers: ['coil.cybozu.com'],
    },
    index,
    ipv4: `10.100.0.${index * 32}/27`,
  });
  await blocks.create(block(0, 'kl-a'));
  await blocks.create(block(1, 'kl-gone'));
  const allocations = custom('ipam.gcp-cni.cast.ai', 'v1alpha1', 'IPAllocation', 'ipallocations');
  const allocation = (name: string, podName: string, podUID: string) => ({
    metadata: { name },
    spec: {
      pool: 'live',
      ip: `10.111.0.${name.slice(-1)}`,
      podName,
      podNamespace: 'default',
      podUID,
      nodeName: 'kl-a',
      instance: 'kl-a',
      zone: 'europe-west1-b',
      containerID: `c${name}`,
      ifName: 'eth0',
      allocatedAt: new Date().toISOString(),
      phase: 'Allocated',
    },
  });
  await allocations.create(allocation('live-1', 'a', pod.metadata.uid!));
  await allocations.create(allocation('live-2', 'b', 'uid-of-a-gone-pod'));

  const r = judgeCluster(await readCluster(info.kubeconfig));
  expect(r.pools).toEqual([{ pool: 'default', blocks: 2, capacity: 2048, byNode: { 'kl-a': 1, 'kl-gone': 1 } }]);
  expect(r.leakedBlocks.map((b) => `${b.name} ${b.node} ${b.ipv4}`)).toEqual(['default-1 kl-gone 10.100.0.32/27']);
  expect(r.leakedAllocations.map((a) => `${a.name}: ${a.why}`)).toEqual(['live-2: pod default/b is gone']);

  expect(await deleteBlocks(['default-1'], info.kubeconfig)).toEqual([{ block: 'default-1', ok: true }]);
  expect(await blocks.find('default-1')).toBeUndefined();
  expect((await blocks.get('default-0')).metadata.finalizers).toEqual(['coil.cybozu.com']);
  expect(judgeCluster(await readCluster(info.kubeconfig)).leakedBlocks).toEqual([]);
});
