// Measures the one question behind "our own informer or client-node's": what does a ConfigMap informer deliver when
// its connections to a real kube-apiserver break? The same script drives @kubernetes/client-node's makeInformer
// (as its README shows it, then with the restart-on-error its users add) and @cnikit/kube's Informer through a TCP
// proxy: 40 updates, the connection reset every 8th, the server refused during 5 of them. Bundled with esbuild
// and run by tools/bench/kube-informers.mjs; prints one JSON line per informer.
import { CoreV1Api, KubeConfig, makeInformer, type V1ConfigMap } from '@kubernetes/client-node';
import { ConfigMaps, Informer, ResourceClient, type ConfigMap } from '@cnikit/kube';
import { retry, sleep } from '@cnikit/netlib/retry';
// by path: the package index also re-exports kernel test support, which this script does not need
import { startCluster, stopCluster, type ClusterInfo } from '../../../testing/kube/src/cluster';
import { TcpProxy } from '../../../testing/kube/src/tcp-proxy';
import { transportFor, uniqueName } from '../../../testing/kube/src/kit';

const UPDATES = 40;

interface Subject {
  seqs: number[];
  lists: () => number;
  errors: () => number;
  start(): Promise<void>;
  stop(): Promise<void>;
}

/** Resolves when cond holds; false after timeoutMs (a figure, not a failure). */
async function waitUntil(cond: () => boolean, timeoutMs: number): Promise<boolean> {
  const backoff = { steps: Infinity, initialMs: 20, factor: 1, jitter: 0, capMs: 20 };
  const check = async (): Promise<boolean> => {
    if (!cond()) throw new Error('not yet');
    return true;
  };
  return retry({ backoff, retriable: () => true, until: Date.now() + timeoutMs }, check).catch(() => false);
}

/** client-node's own KubeConfig of the cluster, its server address the proxy's. */
function clientNodeConfig(cluster: ClusterInfo, server: string): KubeConfig {
  const kc = new KubeConfig();
  kc.loadFromFile(cluster.kubeconfig);
  const clusters = kc.clusters.map((c) => ({ ...c, server }));
  kc.loadFromOptions({ clusters, users: kc.users, contexts: kc.contexts, currentContext: kc.currentContext });
  return kc;
}

function clientNode(cluster: ClusterInfo, server: string, label: string, restartOnError: boolean): Subject {
  const kc = clientNodeConfig(cluster, server);
  const api = kc.makeApiClient(CoreV1Api);
  let lists = 0;
  let errors = 0;
  const listFn = () => (lists++, api.listNamespacedConfigMap({ namespace: 'default', labelSelector: `test=${label}` }));
  const inf = makeInformer<V1ConfigMap>(kc, '/api/v1/namespaces/default/configmaps', listFn, `test=${label}`);
  const seqs: number[] = [];
  inf.on('update', (o) => seqs.push(Number(o.data?.seq)));
  inf.on('error', () => {
    errors++;
    // what client-node's examples tell users to write: start again after a pause
    if (restartOnError) setTimeout(() => void inf.start().catch(() => undefined), 100);
  });
  return { seqs, lists: () => lists, errors: () => errors, start: () => inf.start(), stop: () => inf.stop() };
}

function kit(cluster: ClusterInfo, server: string, label: string): Subject {
  const transport = transportFor(cluster, { server });
  // the kit's default reconnect backoff (200 ms doubling, 30 s at most)
  const inf = new Informer(new ResourceClient(transport, ConfigMaps, { namespace: 'default' }), { labelSelector: `test=${label}` });
  const seqs: number[] = [];
  inf.addHandlers({ update: (_, o) => seqs.push(Number(o.data?.seq)) });
  const stop = async (): Promise<void> => {
    await inf.stop();
    transport.close();
  };
  return { seqs, lists: () => inf.stats.lists, errors: () => inf.stats.watchErrors, start: () => inf.start(), stop };
}

/**
 * 40 updates; every 8th, once the informer has it (or 2 s passed), its connections are reset; the server is
 * refused for 5 updates around the 20th.
 */
async function breakConnections(cms: ResourceClient<ConfigMap>, name: string, proxy: TcpProxy, seqs: number[]): Promise<number> {
  let resets = 0;
  for (let i = 1; i <= UPDATES; i++) {
    await cms.patch(name, { data: { seq: String(i) } });
    if (i === 20) {
      proxy.block();
      for (let j = 0; j < 5; j++) await cms.patch(name, { data: { seq: String(++i) } });
      await sleep(300);
      proxy.unblock();
    }
    if (i % 8 !== 0) continue;
    const seen = i;
    await waitUntil(() => seqs.includes(seen), 2000);
    if (proxy.openConnections > 0 && proxy.dropAll() > 0) resets++;
  }
  return resets;
}

async function measure(cluster: ClusterInfo, which: string, make: (server: string, label: string) => Subject): Promise<object> {
  const label = uniqueName('cmp');
  const proxy = await TcpProxy.forUrl(cluster.server).listen();
  const direct = transportFor(cluster);
  const cms = new ResourceClient(direct, ConfigMaps, { namespace: 'default' });
  const name = uniqueName('cmp-cm');
  await cms.create({ metadata: { name, labels: { test: label } }, data: { seq: '0' } });
  const subject = make(proxy.urlFor(cluster.server), label);
  try {
    await subject.start();
    const resets = await breakConnections(cms, name, proxy, subject.seqs);
    const t0 = Date.now();
    const caughtUp = await waitUntil(() => subject.seqs.includes(UPDATES), 10_000);
    const seen = new Set(subject.seqs);
    return {
      informer: which,
      resets,
      delivered: seen.size,
      missed: UPDATES - seen.size,
      repeated: subject.seqs.length - seen.size,
      lists: subject.lists(),
      errors: subject.errors(),
      caughtUpMs: caughtUp ? Date.now() - t0 : null,
    };
  } finally {
    await subject.stop();
    await cms.delete(name).catch(() => undefined);
    direct.close();
    await proxy.close();
  }
}

async function main(): Promise<void> {
  const cluster = await startCluster({ stateDir: process.argv[2], garbageCollector: false });
  try {
    const rows = [
      await measure(cluster, 'client-node makeInformer', (s, l) => clientNode(cluster, s, l, false)),
      await measure(cluster, 'client-node + restart on error', (s, l) => clientNode(cluster, s, l, true)),
      await measure(cluster, '@cnikit/kube Informer', (s, l) => kit(cluster, s, l)),
    ];
    for (const r of rows) process.stdout.write(`${JSON.stringify(r)}\n`);
  } finally {
    await stopCluster(cluster);
  }
}

main().then(
  () => process.exit(0),
  (err: Error) => {
    process.stderr.write(`informer-compare: ${err.stack ?? err.message}\n`);
    process.exit(1);
  },
);
