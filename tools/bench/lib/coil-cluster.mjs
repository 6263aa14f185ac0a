// A one-node Coil set-up for the benchmark: a real kube-apiserver (packages/kube's test cluster, run by
// Node's type stripping), Coil's CRDs, pool `default`, a Node, the built coil-ipam-controller and coild
// (coild doing its node-side work in a network namespace), and a minimal HTTPS API client.
import { spawn, spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as http from 'node:http';
import * as https from 'node:https';
import * as path from 'node:path';

process.removeAllListeners('warning');
process.on('warning', (w) => {
  if (w.code !== 'MODULE_TYPELESS_PACKAGE_JSON' && w.name !== 'ExperimentalWarning') console.error(`${w.name}: ${w.message}`);
});

export function ip(...args) {
  const r = spawnSync('ip', args, { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`ip ${args.join(' ')}: ${r.stderr.trim()}`);
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export async function startCoil({ root, binDir, work, nodeNs, pool }) {
  const { load, loadAll } = await import('js-yaml');
  const { startCluster, stopCluster, freePort } = await import(path.join(root, 'testing/kube/src/cluster.ts'));
  const cluster = await startCluster({ stateDir: path.join(work, 'cluster'), buildScript: path.join(root, 'tools/cluster/build.sh') });
  const kc = load(fs.readFileSync(cluster.kubeconfig, 'utf8'));
  const tls = {
    ca: Buffer.from(kc.clusters[0].cluster['certificate-authority-data'], 'base64'),
    cert: Buffer.from(kc.users[0].user['client-certificate-data'], 'base64'),
    key: Buffer.from(kc.users[0].user['client-key-data'], 'base64'),
  };
  const api = (method, p, body, contentType = 'application/json') =>
    new Promise((resolve, reject) => {
      const data = body === undefined ? undefined : JSON.stringify(body);
      const req = https.request(
        `${cluster.server}${p}`,
        { method, ...tls, headers: { Accept: 'application/json', ...(data ? { 'Content-Type': contentType } : {}) } },
        (res) => {
          let text = '';
          res.on('data', (c) => {
            text += c;
          });
          res.on('end', () => {
            let body;
            try {
              body = text ? JSON.parse(text) : {};
            } catch {
              body = { text };
            }
            resolve({ status: res.statusCode, body });
          });
        },
      );
      req.on('error', reject);
      req.end(data);
    });
  const procs = [];
  const stop = async () => {
    for (const p of procs) if (p.exitCode === null) p.kill('SIGTERM');
    await sleep(300);
    await stopCluster(cluster);
  };
  try {
    for (const crd of loadAll(fs.readFileSync(path.join(root, 'packages/coil/config/crds.yaml'), 'utf8'))) {
      await api('POST', '/apis/apiextensions.k8s.io/v1/customresourcedefinitions', crd);
    }
    const served = async () =>
      (await Promise.all(['addresspools', 'addressblocks', 'blockrequests'].map((p) => api('GET', `/apis/coil.cybozu.com/v2/${p}`)))).every(
        (r) => r.status === 200,
      );
    for (let i = 0; !(await served()); i++) {
      if (i > 150) throw new Error('Coil CRDs not served');
      await sleep(200);
    }
    await api('POST', '/apis/coil.cybozu.com/v2/addresspools', {
      apiVersion: 'coil.cybozu.com/v2',
      kind: 'AddressPool',
      metadata: { name: 'default' },
      spec: pool,
    });
    await api('POST', '/api/v1/nodes', { apiVersion: 'v1', kind: 'Node', metadata: { name: 'bench-node' } });
    await api(
      'PATCH',
      '/api/v1/nodes/bench-node/status',
      { status: { addresses: [{ type: 'InternalIP', address: '10.97.0.1' }] } },
      'application/merge-patch+json',
    );
    const log = fs.openSync(path.join(work, 'coil.log'), 'a');
    const [cm, ch, dm, dh] = [await freePort(), await freePort(), await freePort(), await freePort()];
    const controller = spawn(
      path.join(binDir, 'coil-ipam-controller'),
      [
        '--kubeconfig',
        cluster.kubeconfig,
        '--metrics-addr',
        `127.0.0.1:${cm}`,
        '--health-addr',
        `127.0.0.1:${ch}`,
        '--leader-election-namespace',
        'kube-system',
      ],
      { stdio: ['ignore', log, log] },
    );
    procs.push(controller);
    const socket = path.join(work, 'coild.sock');
    const coild = spawn(
      path.join(binDir, 'coild'),
      [
        '--kubeconfig',
        cluster.kubeconfig,
        '--netns',
        `/var/run/netns/${nodeNs}`,
        '--node-name',
        'bench-node',
        '--socket',
        socket,
        '--metrics-addr',
        `127.0.0.1:${dm}`,
        '--health-addr',
        `127.0.0.1:${dh}`,
      ],
      { stdio: ['ignore', log, log] },
    );
    procs.push(coild);
    for (let i = 0; ; i++) {
      const ok = await new Promise((resolve) =>
        http
          .get(`http://127.0.0.1:${dh}/readyz`, (res) => {
            res.resume();
            resolve(res.statusCode === 200);
          })
          .on('error', () => resolve(false)),
      );
      if (ok) break;
      if (i > 300 || coild.exitCode !== null)
        throw new Error(`coild did not get ready:\n${fs.readFileSync(path.join(work, 'coil.log'), 'utf8').slice(-2000)}`);
      await sleep(100);
    }
    return { api, socket, coild, controller, stop, metricsUrl: `http://127.0.0.1:${dm}/metrics` };
  } catch (e) {
    await stop();
    throw e;
  }
}
