/**
 * Test helpers on top of a running cluster: transports (direct, or through a TcpProxy), unique names, and
 * etcd compaction (to make old resourceVersions expire and provoke 410 Gone).
 */
import * as http from 'node:http';
import type { AddressInfo } from 'node:net';
import { credentialsFromDoc, credentialsFromFiles, KubeTransport, type KubeCredentials, type TransportOptions } from '@cnikit/kube';
import { readState, type ClusterInfo } from './cluster';

/** Environment variable through which jest's globalSetup hands the cluster's state dir to test files. */
export const TEST_CLUSTER_ENV = 'CNIKIT_TEST_CLUSTER';

/** The cluster started by globalSetup (or `npm run cluster -- up`, via its state dir). */
export function testCluster(stateDir = process.env[TEST_CLUSTER_ENV]): ClusterInfo {
  const info = stateDir ? readState(stateDir) : undefined;
  if (!info) throw new Error(`kube testing: no cluster state in ${stateDir ?? `$${TEST_CLUSTER_ENV} (unset)`}; is globalSetup configured?`);
  return info;
}

/** Credentials for the cluster, optionally with another server address (a TcpProxy in front). */
export function kubeConfigFor(info: ClusterInfo, server?: string): KubeCredentials {
  const kc = credentialsFromFiles([info.kubeconfig]);
  return server ? kc.withServer(server) : kc;
}

export function transportFor(info: ClusterInfo, opts: TransportOptions & { server?: string } = {}): KubeTransport {
  return new KubeTransport(kubeConfigFor(info, opts.server), opts);
}

/** A transport to a stand-in API server (a test's own http.Server answering the few paths it needs), started on a free port. */
export async function standInTransport(srv: http.Server): Promise<KubeTransport> {
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  const kc = credentialsFromDoc(
    {
      clusters: [{ name: 'c', cluster: { server: `http://127.0.0.1:${(srv.address() as AddressInfo).port}` } }],
      contexts: [{ name: 'x', context: { cluster: 'c' } }],
      'current-context': 'x',
    },
    '.',
  );
  return new KubeTransport(kc);
}

let counter = 0;
/** A DNS-1123 name unique in this test run. */
export function uniqueName(prefix: string): string {
  counter++;
  return `${prefix}-${process.pid.toString(36)}-${Date.now().toString(36).slice(-4)}${counter}`.toLowerCase();
}

function etcdPost<T>(etcdUrl: string, path: string, body: unknown): Promise<T> {
  return new Promise((resolve, reject) => {
    const data = JSON.stringify(body);
    const req = http.request(
      `${etcdUrl}${path}`,
      { method: 'POST', headers: { 'Content-Type': 'application/json' }, agent: false },
      (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => {
          text += c;
        });
        res.on('end', () =>
          (res.statusCode ?? 0) === 200 ? resolve(JSON.parse(text) as T) : reject(new Error(`etcd ${path}: ${res.statusCode} ${text}`)),
        );
      },
    );
    req.on('error', reject);
    req.end(data);
  });
}

/** etcd's current revision (what the API server reports as resourceVersion). */
export async function etcdRevision(etcdUrl: string): Promise<number> {
  // A range request for a key that does not exist still returns the store's header revision.
  const res = await etcdPost<{ header: { revision: string } }>(etcdUrl, '/v3/kv/range', {
    key: Buffer.from('/cnikit-none').toString('base64'),
  });
  return Number(res.header.revision);
}

/** Compacts etcd's history up to its current revision: every older resourceVersion becomes "too old" (410). */
export async function compactEtcd(etcdUrl: string): Promise<number> {
  const revision = await etcdRevision(etcdUrl);
  await etcdPost(etcdUrl, '/v3/kv/compaction', { revision: String(revision), physical: true });
  return revision;
}
