/** kubePodSource against a stand-in API server answering the pod GETs. */
import * as http from 'node:http';
import type { KubeTransport } from '@cnikit/kube';
import { standInTransport } from '@cnikit/kube-testing';
import { kubePodSource } from '../src/daemon/kube-pods';

let srv: http.Server;
let transport: KubeTransport;
const seen: string[] = [];

beforeAll(async () => {
  srv = http.createServer((req, res) => {
    seen.push(`${req.method} ${req.url}`);
    const send = (status: number, body: object): void => {
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify(body));
    };
    if (req.url?.startsWith('/api/v1/namespaces/default/pods/db-0')) {
      return send(200, {
        apiVersion: 'v1',
        kind: 'Pod',
        metadata: {
          name: 'db-0',
          namespace: 'default',
          annotations: { 'k8s.aliyun.com/ingress-bandwidth': '10M' },
          ownerReferences: [{ apiVersion: 'apps/v1', kind: 'StatefulSet', name: 'db', uid: 'u1', controller: true }],
        },
        spec: { containers: [] },
      });
    }
    if (req.url?.startsWith('/api/v1/namespaces/default/pods/web')) {
      return send(200, {
        apiVersion: 'v1',
        kind: 'Pod',
        metadata: {
          name: 'web',
          namespace: 'default',
          ownerReferences: [{ apiVersion: 'apps/v1', kind: 'ReplicaSet', name: 'web-1', uid: 'u2' }],
        },
        spec: { containers: [] },
      });
    }
    send(404, { kind: 'Status', apiVersion: 'v1', status: 'Failure', reason: 'NotFound', code: 404, message: 'pods not found' });
  });
  transport = await standInTransport(srv);
});

afterAll(async () => {
  transport.close?.();
  srv.closeAllConnections();
  await new Promise((r) => srv.close(r));
});

it('reads annotations and StatefulSet ownership; a missing pod is undefined', async () => {
  const src = kubePodSource(transport);
  expect(await src.get('default', 'db-0')).toEqual({ annotations: { 'k8s.aliyun.com/ingress-bandwidth': '10M' }, statefulSet: true });
  expect(await src.get('default', 'web')).toEqual({ annotations: {}, statefulSet: false });
  expect(await src.get('default', 'gone')).toBeUndefined();
  expect(seen[0]).toMatch(/^GET \/api\/v1\/namespaces\/default\/pods\/db-0/);
});
