// The node installer on a temp "host": binary copy, conflist rewrite, idempotence, backup and uninstall; the
// plugin's kubeconfig from a fake service-account dir (read back with kube-lite, and used against the test API
// server); watch mode; the built program's exit codes and signals.
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as http from 'node:http';
import * as path from 'node:path';
import { inClusterServer, kubeFromFile } from '@cnikit/kube/lite';
import { eventually, uniqueName } from '@cnikit/kube-testing';
import { bundleProgram } from '@cnikit/netlib-testing';
import { install, tokenFileFor, uninstall, watch, type InstallOptions } from '../src/installer';
import { cluster, ensureNamespace, kube, closeKube, tmpDir } from './support';

const CONFLIST = {
  cniVersion: '1.0.0',
  name: 'k8s-pod-network',
  plugins: [
    { type: 'ptp', mtu: 1460, ipam: { type: 'host-local', ranges: [[{ subnet: '10.64.0.0/24' }]], routes: [{ dst: '0.0.0.0/0' }] } },
    { type: 'portmap', capabilities: { portMappings: true } },
  ],
};
const IPAM = { kubeconfig: '/etc/cni/net.d/gcp-ipam.kubeconfig', pool: 'ippool-default', project: 'test-project', zone: 'europe-west1-b' };

function host(): { dir: string; bin: string; conf: string; binary: string } {
  const dir = tmpDir('gcp-ipam-inst-');
  const conf = path.join(dir, 'net.d');
  fs.mkdirSync(conf);
  fs.writeFileSync(path.join(conf, '10-containerd-net.conflist'), JSON.stringify(CONFLIST, null, 2));
  fs.writeFileSync(path.join(conf, '99-other.conflist'), JSON.stringify({ ...CONFLIST, name: 'other' }));
  const binary = path.join(dir, 'gcp-ipam-src');
  fs.writeFileSync(binary, '#!/bin/sh\necho v1\n');
  return { dir, bin: path.join(dir, 'bin'), conf, binary };
}

test('install copies the binary, rewrites only the first conflist ipam, keeps a backup; a second run changes nothing', () => {
  const h = host();
  const r1 = install({ binary: h.binary, binDir: h.bin, conf: h.conf, ipam: IPAM });
  expect(r1).toMatchObject({ binaryCopied: true, conflistChanged: true, pluginsRewritten: ['ptp'] });
  expect(r1.conflist).toBe(path.join(h.conf, '10-containerd-net.conflist'));
  expect(fs.statSync(path.join(h.bin, 'gcp-ipam')).mode & 0o777).toBe(0o755);
  const after = JSON.parse(fs.readFileSync(r1.conflist, 'utf8'));
  expect(after.plugins[0]).toEqual({ ...CONFLIST.plugins[0], ipam: { ...IPAM, type: 'gcp-ipam' } });
  expect(after.plugins[1]).toEqual(CONFLIST.plugins[1]);
  expect(JSON.parse(fs.readFileSync(r1.backup, 'utf8'))).toEqual(CONFLIST);
  expect(JSON.parse(fs.readFileSync(path.join(h.conf, '99-other.conflist'), 'utf8')).plugins[0].ipam.type).toBe('host-local');
  const mtime = fs.statSync(r1.conflist).mtimeMs;
  const r2 = install({ binary: h.binary, binDir: h.bin, conf: h.conf, ipam: IPAM });
  expect(r2).toMatchObject({ binaryCopied: false, conflistChanged: false });
  expect(fs.statSync(r1.conflist).mtimeMs).toBe(mtime);
  expect(JSON.parse(fs.readFileSync(r1.backup, 'utf8'))).toEqual(CONFLIST); // the backup stays the original
  // a new binary and new settings: both updated, backup still the pre-install original
  fs.writeFileSync(h.binary, '#!/bin/sh\necho v2\n');
  const r3 = install({ binary: h.binary, binDir: h.bin, conf: h.conf, ipam: { ...IPAM, pool: 'ippool-2' } });
  expect(r3).toMatchObject({ binaryCopied: true, conflistChanged: true });
  expect(fs.readFileSync(path.join(h.bin, 'gcp-ipam'), 'utf8')).toContain('v2');
  expect(JSON.parse(fs.readFileSync(r1.backup, 'utf8'))).toEqual(CONFLIST);
  expect(uninstall({ binDir: h.bin, conf: h.conf })).toEqual({ restored: true });
  expect(JSON.parse(fs.readFileSync(r1.conflist, 'utf8'))).toEqual(CONFLIST);
  expect(fs.existsSync(path.join(h.bin, 'gcp-ipam'))).toBe(false);
  expect(fs.existsSync(r1.backup)).toBe(false);
});

test('replaceType limits the rewrite; broken or missing conflists are reported', () => {
  const h = host();
  const r = install({ binary: h.binary, binDir: h.bin, conf: h.conf, ipam: IPAM, replaceType: 'static' });
  expect(r.conflistChanged).toBe(false);
  fs.writeFileSync(path.join(h.conf, '10-containerd-net.conflist'), '{ not json');
  expect(() => install({ binary: h.binary, binDir: h.bin, conf: h.conf, ipam: IPAM })).toThrow(/is not JSON/);
  expect(() => install({ binary: h.binary, binDir: h.bin, conf: path.join(h.dir, 'nope'), ipam: IPAM })).toThrow(/does not exist/);
  const empty = tmpDir();
  expect(() => install({ binary: h.binary, binDir: h.bin, conf: empty, ipam: IPAM })).toThrow(/no \*\.conflist/);
});

afterAll(closeKube);

/** A service-account mount as the kubelet makes it: token and ca.crt. */
function serviceAccount(token: string, ca = '-----BEGIN CERTIFICATE-----\nfake\n-----END CERTIFICATE-----\n'): string {
  const dir = tmpDir('gcp-ipam-sa-');
  fs.writeFileSync(path.join(dir, 'token'), token);
  fs.writeFileSync(path.join(dir, 'ca.crt'), ca);
  return dir;
}

/** Replaces the token the way the kubelet does: a new file renamed over the old one. */
function rotate(saDir: string, token: string): void {
  fs.writeFileSync(path.join(saDir, '.token.new'), token);
  fs.renameSync(path.join(saDir, '.token.new'), path.join(saDir, 'token'));
}

/** Writes `file` with a rename, as editors and config tools do: the watcher never reads half a file. */
function replaceFile(file: string, content: string | Buffer): void {
  fs.writeFileSync(`${file}.new`, content);
  fs.renameSync(`${file}.new`, file);
}

/** The Authorization header of one request kube-lite makes with `kubeconfig`, to a local HTTP server. */
async function bearerSentWith(kubeconfig: string): Promise<string | undefined> {
  let seen: string | undefined;
  const server = http.createServer((req, res) => {
    seen = req.headers.authorization;
    res.setHeader('Content-Type', 'application/json').end('{}');
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as { port: number };
  const text = fs.readFileSync(kubeconfig, 'utf8').replace(/https:\/\/[^"]+/, `http://127.0.0.1:${port}`);
  const local = path.join(path.dirname(kubeconfig), 'local.kubeconfig');
  fs.writeFileSync(local, text);
  const client = kubeFromFile(local);
  try {
    await client.request('GET', '/version');
  } finally {
    client.close();
    server.close();
    fs.rmSync(local);
  }
  return seen;
}

const yamlOf = (file: string): { clusters: { cluster: Record<string, string> }[]; users: { user: { tokenFile: string } }[] } =>
  JSON.parse(fs.readFileSync(file, 'utf8'));
const ipamOf = (conflist: string): Record<string, unknown> => JSON.parse(fs.readFileSync(conflist, 'utf8')).plugins[0].ipam;

test('the API server URL comes from the service env, an IPv6 host bracketed', () => {
  expect(inClusterServer({ KUBERNETES_SERVICE_HOST: '10.0.0.1', KUBERNETES_SERVICE_PORT: '443' })).toBe('https://10.0.0.1:443');
  expect(inClusterServer({ KUBERNETES_SERVICE_HOST: 'fd00::1', KUBERNETES_SERVICE_PORT: '6443' })).toBe('https://[fd00::1]:6443');
  expect(() => inClusterServer({})).toThrow(/KUBERNETES_SERVICE_HOST unset/);
});

test('the kubeconfig embeds the CA, names a 0600 copy of the token, and kube-lite reads and sends it', async () => {
  const h = host();
  const sa = serviceAccount('token-1\n');
  const out = path.join(h.conf, 'gcp-ipam', 'gcp-ipam.kubeconfig');
  const server = inClusterServer({ KUBERNETES_SERVICE_HOST: 'fd00::1', KUBERNETES_SERVICE_PORT: '6443' });
  const r = install({
    binary: h.binary,
    binDir: h.bin,
    conf: h.conf,
    ipam: IPAM_NO_KUBE,
    kubeconfig: { out, server, serviceAccountDir: sa },
  });
  expect(r).toMatchObject({ kubeconfigChanged: true, tokenChanged: true, conflistChanged: true });
  const kc = yamlOf(out);
  expect(Buffer.from(kc.clusters[0]!.cluster['certificate-authority-data']!, 'base64').toString()).toBe(
    fs.readFileSync(path.join(sa, 'ca.crt'), 'utf8'),
  );
  expect(kc.users[0]!.user.tokenFile).toBe(tokenFileFor(out));
  expect(fs.readFileSync(tokenFileFor(out), 'utf8')).toBe('token-1');
  expect(fs.statSync(tokenFileFor(out)).mode & 0o777).toBe(0o600);
  const client = kubeFromFile(out);
  expect(client.server).toBe('https://[fd00::1]:6443');
  client.close();
  expect(await bearerSentWith(out)).toBe('Bearer token-1');
  expect(ipamOf(r.conflist).kubeconfig).toBe(out); // no host prefix: the path as is
  expect(
    install({ binary: h.binary, binDir: h.bin, conf: h.conf, ipam: IPAM_NO_KUBE, kubeconfig: { out, server, serviceAccountDir: sa } }),
  ).toMatchObject({
    binaryCopied: false,
    kubeconfigChanged: false,
    tokenChanged: false,
    conflistChanged: false,
  });
  uninstall({ binDir: h.bin, conf: h.conf, kubeconfigOut: out });
  expect([fs.existsSync(out), fs.existsSync(tokenFileFor(out))]).toEqual([false, false]);
});

const IPAM_NO_KUBE = { pool: 'ippool-default', project: 'test-project' };

/** A node root mounted at <root> in the pod, as hostPath mounts under /host do. */
function hostUnderPrefix(): { root: string; o: InstallOptions; out: string } {
  const h = host();
  const root = tmpDir('gcp-ipam-root-');
  const conf = path.join(root, 'etc', 'cni', 'net.d');
  fs.mkdirSync(conf, { recursive: true });
  fs.copyFileSync(path.join(h.conf, '10-containerd-net.conflist'), path.join(conf, '10-containerd-net.conflist'));
  const out = path.join(conf, 'gcp-ipam', 'gcp-ipam.kubeconfig');
  const o: InstallOptions = {
    binary: h.binary,
    binDir: path.join(root, 'opt', 'cni', 'bin'),
    conf,
    ipam: IPAM_NO_KUBE,
    hostPrefix: root,
    kubeconfig: { out, server: 'https://10.0.0.1:443', serviceAccountDir: serviceAccount('token-1') },
  };
  return { root, o, out };
}

test('paths written into the conflist and the kubeconfig are the host paths: the host prefix stripped', () => {
  const { root, o, out } = hostUnderPrefix();
  const r = install(o);
  expect(ipamOf(r.conflist).kubeconfig).toBe('/etc/cni/net.d/gcp-ipam/gcp-ipam.kubeconfig');
  expect(yamlOf(out).users[0]!.user.tokenFile).toBe('/etc/cni/net.d/gcp-ipam/gcp-ipam.token');
  expect(fs.readFileSync(path.join(root, 'etc/cni/net.d/gcp-ipam/gcp-ipam.token'), 'utf8')).toBe('token-1');
  const outside = { ...o.kubeconfig!, out: path.join(tmpDir(), 'k') };
  expect(() => install({ ...o, kubeconfig: outside })).toThrow(/is not under the host prefix .*: the plugin on the host could not read it/);
});

test('nodeName, zone and kubeconfig are added to the ipam section, never over values the --ipam JSON sets', () => {
  const { o } = hostUnderPrefix();
  const r = install({ ...o, nodeName: 'node-a.example', zone: 'us-central1-a' });
  expect(ipamOf(r.conflist)).toEqual({
    type: 'gcp-ipam',
    ...IPAM_NO_KUBE,
    kubeconfig: '/etc/cni/net.d/gcp-ipam/gcp-ipam.kubeconfig',
    nodeName: 'node-a.example',
    zone: 'us-central1-a',
  });
  const explicit = { ...IPAM, nodeName: 'set-by-hand' }; // IPAM sets kubeconfig and zone
  install({ ...o, ipam: explicit, nodeName: 'node-a.example', zone: 'us-central1-a' });
  expect(ipamOf(r.conflist)).toEqual({ type: 'gcp-ipam', ...explicit });
});

test('watch catches up with a rotated token and a reverted conflist, logs once per change, and stops on abort', async () => {
  const { o, out } = hostUnderPrefix();
  const first = install(o);
  const logged: Record<string, unknown>[] = [];
  const stop = new AbortController();
  const running = watch(o, { intervalMs: 20, signal: stop.signal, log: (e) => logged.push(e) });
  try {
    await new Promise((r) => setTimeout(r, 150));
    expect(logged).toEqual([]); // nothing to do: nothing written, nothing logged
    const kubeconfigBefore = fs.readFileSync(out, 'utf8');
    rotate(o.kubeconfig!.serviceAccountDir!, 'token-2');
    await eventually('the rotated token copied', () => fs.readFileSync(tokenFileFor(out), 'utf8') === 'token-2');
    expect(fs.readFileSync(out, 'utf8')).toBe(kubeconfigBefore);
    replaceFile(first.conflist, fs.readFileSync(first.backup)); // someone puts host-local back
    await eventually('the conflist rewritten', () => ipamOf(first.conflist).type === 'gcp-ipam');
    replaceFile(first.conflist, '{ broken'); // a failed round is logged, the next one retried
    await eventually('the error logged', () => logged.some((e) => e.event === 'error'));
    replaceFile(first.conflist, fs.readFileSync(first.backup));
    await eventually('the conflist rewritten again', () => ipamOf(first.conflist).type === 'gcp-ipam');
  } finally {
    stop.abort();
    await running;
  }
  expect(logged.map((e) => e.event).filter((e, i, all) => e !== 'error' || all[i - 1] !== 'error')).toEqual([
    'token-written',
    'conflist-rewritten',
    'error',
    'conflist-rewritten',
  ]);
});

test('the kubeconfig works against a real API server with a service-account token from TokenRequest', async () => {
  const name = uniqueName('gcp-ipam-sa');
  await ensureNamespace('kube-system');
  await kube().request('POST', '/api/v1/namespaces/kube-system/serviceaccounts', { body: { metadata: { name } } });
  const tr = await kube().request<{ status: { token: string } }>('POST', `/api/v1/namespaces/kube-system/serviceaccounts/${name}/token`, {
    body: { apiVersion: 'authentication.k8s.io/v1', kind: 'TokenRequest', spec: { expirationSeconds: 600 } },
  });
  const h = host();
  const out = path.join(h.conf, 'gcp-ipam.kubeconfig');
  const sa = serviceAccount(tr.status.token, fs.readFileSync(cluster.caFile, 'utf8'));
  install({
    binary: h.binary,
    binDir: h.bin,
    conf: h.conf,
    ipam: IPAM_NO_KUBE,
    kubeconfig: { out, server: cluster.server, serviceAccountDir: sa },
  });
  const client = kubeFromFile(out);
  try {
    const review = await client.request<{ status: { userInfo: { username: string } } }>(
      'POST',
      '/apis/authentication.k8s.io/v1/selfsubjectreviews',
      { apiVersion: 'authentication.k8s.io/v1', kind: 'SelfSubjectReview' },
    );
    expect(review.status.userInfo.username).toBe(`system:serviceaccount:kube-system:${name}`);
  } finally {
    client.close();
  }
});

describe('the program', () => {
  let bundle: string;
  beforeAll(async () => {
    bundle = path.join(tmpDir('gcp-ipam-inst-bin-'), 'gcp-ipam-installer.js');
    const entry = path.join(__dirname, '..', 'src', 'cmd', 'gcp-ipam-installer.ts');
    await bundleProgram(entry, bundle);
  }, 60_000);

  interface Run {
    code: Promise<number | null>;
    stdout: () => string;
    stderr: () => string;
    kill: (s: NodeJS.Signals) => void;
  }
  function run(args: string[], env: NodeJS.ProcessEnv = {}): Run {
    const child = spawn(process.execPath, [bundle, ...args], {
      env: { PATH: process.env.PATH, ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const code = new Promise<number | null>((r) => child.on('exit', (c) => r(c)));
    return { code, stdout: () => stdout, stderr: () => stderr, kill: (s) => child.kill(s) };
  }

  test('a bad --ipam exits 1 naming the flag, the expected form and the value; nothing is written', async () => {
    const h = host();
    for (const bad of ['{bad', '[1]']) {
      const r = run(['install', '--binary', h.binary, '--bin-dir', h.bin, '--conf', h.conf, '--ipam', bad]);
      expect(await r.code).toBe(1);
      expect(r.stderr()).toContain(`gcp-ipam-installer: --ipam: expected a JSON object, got ${JSON.stringify(bad)}`);
    }
    expect(fs.existsSync(h.bin)).toBe(false);
  });

  test('--watch installs, keeps the token fresh, and exits 0 on SIGTERM', async () => {
    const { root, o, out } = hostUnderPrefix();
    const sa = o.kubeconfig!.serviceAccountDir!;
    const r = run(
      [
        ...['--binary', o.binary, '--host-prefix', root, '--bin-dir', o.binDir, '--conf', o.conf],
        ...['--kubeconfig-out', out, '--service-account-dir', sa, '--ipam', JSON.stringify(IPAM_NO_KUBE), '--watch', '--interval', '0.05'],
      ],
      { KUBERNETES_SERVICE_HOST: 'fd00::1', KUBERNETES_SERVICE_PORT: '443', NODE_NAME: 'node-b', GCP_ZONE: 'europe-west1-b' },
    );
    try {
      const report = JSON.parse(
        await eventually('the first report', () => (r.stdout().includes('\n') ? r.stdout().split('\n')[0] : undefined)),
      );
      expect(ipamOf(report.conflist)).toMatchObject({
        nodeName: 'node-b',
        zone: 'europe-west1-b',
        kubeconfig: '/etc/cni/net.d/gcp-ipam/gcp-ipam.kubeconfig',
      });
      expect(yamlOf(out).clusters[0]!.cluster.server).toBe('https://[fd00::1]:443');
      rotate(sa, 'token-3');
      await eventually('the rotated token copied', () => fs.readFileSync(tokenFileFor(out), 'utf8') === 'token-3');
    } finally {
      r.kill('SIGTERM');
    }
    expect(await r.code).toBe(0);
    const events = r
      .stderr()
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l).event);
    expect(events).toEqual(['binary-copied', 'token-written', 'kubeconfig-written', 'conflist-rewritten', 'token-written', 'stop']);
  });
});
