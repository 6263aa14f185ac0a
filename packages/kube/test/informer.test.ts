// Informers against the real API server: resume after dropped connections without missing or repeating
// events, re-list after 410 Gone (etcd compacted), bookmarks, and the indexed cache.
import {
  ConfigMaps,
  Informer,
  Pods,
  ResourceClient,
  byField,
  byLabel,
  installCrd,
  type ConfigMap,
  type KubeObject,
  type KubeTransport,
  type Pod,
} from '@cnikit/kube';
import { TcpProxy, compactEtcd, transportFor, uniqueName } from '@cnikit/kube-testing';
import { AddressPools, cluster, eventually, sampleCrd } from './support';

let direct: KubeTransport;
const cleanups: (() => Promise<unknown> | void)[] = [];

beforeAll(() => {
  direct = transportFor(cluster);
});
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});
afterAll(() => direct.close());

interface Seen {
  type: string;
  name: string;
  seq?: string;
  rv?: string;
  finalStateUnknown?: boolean;
}

function record<T extends KubeObject & { data?: Record<string, string> }>(inf: Informer<T>): Seen[] {
  const seen: Seen[] = [];
  inf.addHandlers({
    add: (o) => seen.push({ type: 'add', name: o.metadata.name!, seq: o.data?.seq, rv: o.metadata.resourceVersion }),
    update: (_, o) => seen.push({ type: 'update', name: o.metadata.name!, seq: o.data?.seq, rv: o.metadata.resourceVersion }),
    delete: (o, info) => seen.push({ type: 'delete', name: o.metadata.name!, finalStateUnknown: info.finalStateUnknown }),
  });
  return seen;
}

/** A ConfigMap informer whose connections go through a proxy the test can break. */
async function proxiedInformer(label: string): Promise<{ proxy: TcpProxy; inf: Informer<ConfigMap> }> {
  const proxy = await TcpProxy.forUrl(cluster.server).listen();
  const transport = transportFor(cluster, { server: proxy.urlFor(cluster.server) });
  const inf = new Informer(new ResourceClient(transport, ConfigMaps, { namespace: 'default' }), {
    labelSelector: `test=${label}`,
    backoff: { initialMs: 50, maxMs: 500 },
  });
  cleanups.push(
    () => proxy.close(),
    () => transport.close(),
    () => inf.stop(),
  );
  return { proxy, inf };
}

test('watch resumes after dropped connections without missing or repeating events', async () => {
  const label = uniqueName('resume');
  const { proxy, inf } = await proxiedInformer(label);
  const cms = new ResourceClient(direct, ConfigMaps, { namespace: 'default' });
  const name = uniqueName('resume-cm');
  await cms.create({ metadata: { name, labels: { test: label } }, data: { seq: '0' } });
  const seen = record(inf);
  await inf.start();
  expect(inf.store.size).toBe(1);

  const N = 40;
  for (let i = 1; i <= N; i++) {
    await cms.patch(name, { data: { seq: String(i) } });
    if (i % 8 === 0) {
      // Connection dropped mid-stream; the next writes happen while the informer reconnects.
      await eventually('watch connected', () => proxy.openConnections > 0);
      expect(proxy.dropAll()).toBeGreaterThan(0);
    }
    if (i === 20) {
      // A longer outage: the API server is unreachable while five more writes happen.
      proxy.block();
      for (let j = 0; j < 5; j++) await cms.patch(name, { data: { seq: String(++i) } });
      await new Promise((r) => setTimeout(r, 300));
      proxy.unblock();
    }
  }
  await eventually('last event', () => seen.at(-1)?.seq === String(N));
  const seqs = seen.filter((s) => s.type === 'update').map((s) => Number(s.seq));
  expect(seqs).toEqual(Array.from({ length: N }, (_, k) => k + 1));
  // Every event carries a distinct, increasing resourceVersion: nothing repeated.
  const rvs = seen.map((s) => Number(s.rv));
  expect([...rvs].sort((a, b) => a - b)).toEqual(rvs);
  expect(new Set(rvs).size).toBe(rvs.length);
  // Resumed by resourceVersion, not re-listed.
  expect(inf.stats.lists).toBe(1);
  expect(inf.stats.relistsOnGone).toBe(0);
  // It did reconnect; how many watches that took depends on when each drop met a connection (a drop can
  // land while a reconnect is being set up), so the count is not asserted.
  expect(inf.stats.watches).toBeGreaterThan(1);
  expect(inf.store.get(`default/${name}`)?.data?.seq).toBe(String(N));
});

test('informer re-lists on 410 Gone after etcd compaction and reconciles its cache', async () => {
  const label = uniqueName('gone');
  const { proxy, inf } = await proxiedInformer(label);
  const cms = new ResourceClient(direct, ConfigMaps, { namespace: 'default' });
  const [a, b, c] = ['a', 'b', 'c'].map((x) => uniqueName(`gone-${x}`));
  await cms.create({ metadata: { name: a!, labels: { test: label } }, data: { seq: '0' } });
  await cms.create({ metadata: { name: b!, labels: { test: label } }, data: { seq: '0' } });
  const seen = record(inf);
  await inf.start();
  const rvBefore = inf.resourceVersion;

  // While the informer cannot reach the server: a changes, b goes, c comes, and history is compacted.
  proxy.block();
  await cms.patch(a!, { data: { seq: '1' } });
  await cms.delete(b!);
  await cms.create({ metadata: { name: c!, labels: { test: label } }, data: { seq: '0' } });
  const compactedAt = await compactEtcd(cluster.etcd);
  expect(compactedAt).toBeGreaterThan(Number(rvBefore));
  seen.length = 0;
  proxy.unblock();

  await eventually('re-list after 410', () => inf.stats.relistsOnGone >= 1 && inf.stats.lists >= 2 && seen.length >= 3);
  expect(seen).toEqual(
    expect.arrayContaining([
      expect.objectContaining({ type: 'update', name: a, seq: '1' }),
      expect.objectContaining({ type: 'delete', name: b, finalStateUnknown: true }),
      expect.objectContaining({ type: 'add', name: c }),
    ]),
  );
  expect(inf.store.keys().sort()).toEqual([`default/${a}`, `default/${c}`].sort());
  expect(Number(inf.resourceVersion)).toBeGreaterThanOrEqual(compactedAt);

  // And it watches again from the new list: later changes still arrive.
  await cms.patch(c!, { data: { seq: '7' } });
  await eventually('event after re-list', () => inf.store.get(`default/${c}`)?.data?.seq === '7');
  await cms.delete(a!);
  await cms.delete(c!);
});

test('bookmarks advance the resume point while nothing changes', async () => {
  await installCrd(direct, sampleCrd());
  const label = uniqueName('bm');
  const inf = new Informer(new ResourceClient(direct, AddressPools), { labelSelector: `test=${label}`, watchTimeoutSeconds: 4 });
  cleanups.push(() => inf.stop());
  await inf.start();
  const rv0 = inf.resourceVersion;
  // An object the informer does not select changes: the server's resourceVersion for the resource moves on,
  // and only a bookmark tells the informer so (sent 2 s before each 4 s watch ends).
  const pools = new ResourceClient(direct, AddressPools);
  const other = uniqueName('bm-other');
  const created = await pools.create({ metadata: { name: other }, spec: { cidr: '10.1.0.0/16', blockSizeBits: 4 } });
  await eventually(
    'a bookmark past the unrelated write',
    () => inf.stats.bookmarks >= 1 && Number(inf.resourceVersion) >= Number(created.metadata.resourceVersion),
    20_000,
    100,
  );
  expect(Number(inf.resourceVersion)).toBeGreaterThan(Number(rv0));
  expect(inf.stats.events).toBe(0);
  expect(inf.store.size).toBe(0);
  await pools.delete(other);
});

test('the cache indexes by field (spec.nodeName) and by label, and follows updates and deletes', async () => {
  const ns = 'default';
  const pods = new ResourceClient(direct, Pods, { namespace: ns });
  const label = uniqueName('idx');
  const inf = new Informer<Pod>(pods, {
    labelSelector: `test=${label}`,
    indexers: { node: byField('spec.nodeName'), tier: byLabel('tier') },
  });
  cleanups.push(
    () => inf.stop(),
    () => pods.deleteCollection({ labelSelector: `test=${label}` }),
  );
  const mk = (name: string, node: string, tier: string): Pod => ({
    metadata: { name, labels: { test: label, tier } },
    // No scheduler or kubelet runs: pods stay Pending with the node name they were created with.
    spec: { nodeName: node, containers: [{ name: 'c', image: 'registry.invalid/none' }] },
  });
  const names = ['p1', 'p2', 'p3'].map((p) => uniqueName(p));
  await pods.create(mk(names[0]!, 'node-a', 'gold'));
  await pods.create(mk(names[1]!, 'node-a', 'silver'));
  await inf.start();
  await pods.create(mk(names[2]!, 'node-b', 'gold'));
  await eventually('3 pods cached', () => inf.store.size === 3);

  const onNode = (n: string): string[] =>
    inf.store
      .byIndex('node', n)
      .map((p) => p.metadata.name!)
      .sort();
  const inTier = (t: string): string[] =>
    inf.store
      .byIndex('tier', t)
      .map((p) => p.metadata.name!)
      .sort();
  expect(onNode('node-a')).toEqual([names[0], names[1]].sort());
  expect(onNode('node-b')).toEqual([names[2]]);
  expect(inTier('gold')).toEqual([names[0], names[2]].sort());
  expect(inf.store.indexValues('node')).toEqual(['node-a', 'node-b']);

  await pods.patch(names[1]!, { metadata: { labels: { tier: 'gold' } } });
  await eventually('relabel indexed', () => inTier('gold').length === 3);
  expect(inTier('silver')).toEqual([]);

  await pods.delete(names[0]!, { gracePeriodSeconds: 0 });
  await eventually('delete unindexed', () => onNode('node-a').length === 1);
  expect(onNode('node-a')).toEqual([names[1]]);
});
