// The metrics and health endpoints, wired to real informers, a controller and a leader elector.
import * as http from 'node:http';
import {
  ConfigMaps,
  Controller,
  HealthServer,
  Informer,
  KubeMetrics,
  LeaderElector,
  ResourceClient,
  informersSynced,
  leaderElectionHealthy,
  parseListenAddr,
  type KubeTransport,
} from '@cnikit/kube';
import { transportFor, uniqueName } from '@cnikit/kube-testing';
import { cluster, eventually } from './support';

function get(url: string): Promise<{ status: number; body: string; type: string }> {
  return new Promise((resolve, reject) => {
    http
      .get(url, { agent: false }, (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => {
          body += c;
        });
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body, type: String(res.headers['content-type']) }));
      })
      .on('error', reject);
  });
}

let transport: KubeTransport;
const metrics = new KubeMetrics({ processMetrics: true });
beforeAll(() => {
  transport = transportFor(cluster, { observer: metrics.observeRequests() });
});
afterAll(() => transport.close());

test('/healthz, /readyz and /metrics reflect informers, reconciles, requests and leadership', async () => {
  const label = uniqueName('srv');
  const cms = new ResourceClient(transport, ConfigMaps, { namespace: 'default' });
  const informer = new Informer(cms, { labelSelector: `test=${label}`, metrics, name: 'configmaps' });
  const controller = new Controller({ name: 'srv', metrics, reconcile: async () => undefined }).watch(informer);
  const elector = new LeaderElector({
    transport,
    namespace: 'default',
    name: uniqueName('srv-lease'),
    identity: 'srv-1',
    metrics,
    leaseDurationMs: 4000,
    renewDeadlineMs: 3000,
    retryPeriodMs: 500,
  });
  let unhealthy = false;
  const server = await new HealthServer({ registry: metrics.registry })
    .addHealthCheck('ping', () => true)
    .addHealthCheck('leader-election', leaderElectionHealthy(elector))
    .addHealthCheck('toggle', () => !unhealthy)
    .addReadyCheck('informers', informersSynced(informer))
    .listen();
  try {
    expect(server.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
    // Not ready before the caches are synced.
    const notReady = await get(`${server.url}/readyz`);
    expect(notReady.status).toBe(503);
    expect(notReady.body).toContain('[-]informers failed');

    await cms.create({ metadata: { name: `${label}-a`, labels: { test: label } } });
    await controller.start();
    const ready = await get(`${server.url}/readyz?verbose`);
    expect(ready.status).toBe(200);
    expect(ready.body).toBe('[+]shutdown ok\n[+]informers ok\nreadyz check passed\n');
    expect((await get(`${server.url}/readyz/informers`)).status).toBe(200);
    expect((await get(`${server.url}/readyz/nope`)).status).toBe(404);

    expect(await get(`${server.url}/healthz`)).toMatchObject({ status: 200, body: 'ok' });
    unhealthy = true;
    const sick = await get(`${server.url}/livez`);
    expect(sick.status).toBe(503);
    expect(sick.body).toContain('[-]toggle failed: check returned false');
    unhealthy = false;

    void elector.run();
    await eventually('leading', () => elector.isLeader());
    await eventually('reconciled', async () =>
      /controller_runtime_reconcile_total\{controller="srv",result="success"\} 1/.test(await metrics.registry.metrics()),
    );

    const m = await get(`${server.url}/metrics`);
    expect(m.status).toBe(200);
    expect(m.type).toContain('text/plain');
    expect(m.body).toMatch(/^workqueue_adds_total\{name="srv"\} 1$/m);
    expect(m.body).toMatch(/^informer_lists_total\{resource="configmaps",reason="initial"\} 1$/m);
    expect(m.body).toMatch(/^informer_cache_objects\{resource="configmaps"\} 1$/m);
    expect(m.body).toMatch(/^leader_election_master_status\{name="srv-lease-[^"]+"\} 1$/m);
    expect(m.body).toMatch(/^rest_client_requests_total\{code="200",method="GET"\} \d+$/m);
    expect(m.body).toMatch(/^rest_client_requests_total\{code="201",method="POST"\} \d+$/m);
    expect(m.body).toMatch(/^process_resident_memory_bytes \d+/m);
    expect((await get(`${server.url}/nothing`)).status).toBe(404);

    await elector.stop();
    expect(await metrics.registry.getSingleMetricAsString('leader_election_master_status')).toMatch(/ 0$/m);
  } finally {
    await controller.stop();
    await server.close();
    await cms.delete(`${label}-a`, { ignoreNotFound: true });
  }
});

test('listen flags: [host]:port, "" host = every address, the flag named in the error', () => {
  expect(parseListenAddr(':9384')).toEqual({ host: '', port: 9384 });
  expect(parseListenAddr('127.0.0.1:0')).toEqual({ host: '127.0.0.1', port: 0 });
  expect(parseListenAddr('[::1]:1')).toEqual({ host: '::1', port: 1 });
  expect(parseListenAddr('localhost:65535')).toEqual({ host: 'localhost', port: 65535 });
  for (const bad of ['9384', 'host:', ':65536', ':-1', ':1.5', ':0x10', ': 80']) {
    expect(() => parseListenAddr(bad, '--metrics-addr')).toThrow(
      `--metrics-addr: expected [host]:port with a port 0-65535, got ${JSON.stringify(bad)}`,
    );
  }
  expect(() => parseListenAddr('x')).toThrow(/^listen address: expected \[host\]:port/);
});
