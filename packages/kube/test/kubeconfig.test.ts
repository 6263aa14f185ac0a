// Credentials as client-go finds them: kubeconfig files (merged from $KUBECONFIG), ~/.kube/config, the pod's service
// account; certificates, tokens, basic auth and exec plugins applied to a request's options. Against the real API
// server they are exercised by every kit test (testing/kube's transports read the cluster's kubeconfig with them).
import * as fs from 'node:fs';
import type * as https from 'node:https';
import * as os from 'node:os';
import * as path from 'node:path';
import { dump } from 'js-yaml';
import { credentialsFromFiles, inClusterCredentials, KubeConfigError, loadKubeConfig, type KubeconfigDoc } from '../src';

let dir: string;
beforeEach(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kubeconfig-'));
});
afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

const write = (name: string, doc: KubeconfigDoc | string): string => {
  const file = path.join(dir, name);
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, typeof doc === 'string' ? doc : dump(doc), { mode: 0o755 });
  return file;
};
const b64 = (s: string): string => Buffer.from(s).toString('base64');
const one = (user: Record<string, unknown>, cluster: Record<string, unknown> = {}, namespace?: string): KubeconfigDoc => ({
  clusters: [{ name: 'c', cluster: { server: 'https://10.0.0.1:6443', ...cluster } }],
  users: [{ name: 'u', user }],
  contexts: [{ name: 'x', context: { cluster: 'c', user: 'u', ...(namespace ? { namespace } : {}) } }],
  'current-context': 'x',
});
async function applied(files: string[], context?: string): Promise<https.RequestOptions & { headers: Record<string, string> }> {
  const opts: https.RequestOptions = {};
  await credentialsFromFiles(files, context).applyToHTTPSOptions(opts);
  return opts as https.RequestOptions & { headers: Record<string, string> };
}

test('client certificate and key as data, the CA as a file relative to the kubeconfig; the context names the namespace', async () => {
  write('pki/ca.crt', 'CA');
  const file = write(
    'kc',
    one(
      { 'client-certificate-data': b64('CERT'), 'client-key-data': b64('KEY') },
      { 'certificate-authority': 'pki/ca.crt' },
      'kube-system',
    ),
  );
  const opts = await applied([file]);
  expect({ ca: String(opts.ca), cert: String(opts.cert), key: String(opts.key), reject: opts.rejectUnauthorized }).toEqual({
    ca: 'CA',
    cert: 'CERT',
    key: 'KEY',
    reject: true,
  });
  expect(opts.headers).toEqual({});
  const kc = credentialsFromFiles([file]);
  expect([kc.server, kc.namespace]).toEqual(['https://10.0.0.1:6443', 'kube-system']);
  expect(kc.withServer('https://127.0.0.1:1').server).toBe('https://127.0.0.1:1');
});

test('a token, a token file, a username and password; insecure-skip-tls-verify and tls-server-name', async () => {
  expect((await applied([write('a', one({ token: 't0k' }))])).headers).toEqual({ Authorization: 'Bearer t0k' });
  write('sa/token', 'from-file\n');
  expect((await applied([write('b', one({ tokenFile: 'sa/token' }))])).headers).toEqual({ Authorization: 'Bearer from-file' });
  const basic = await applied([
    write('c', one({ username: 'admin', password: 'pw' }, { 'insecure-skip-tls-verify': true, 'tls-server-name': 'kubernetes' })),
  ]);
  expect(basic.headers).toEqual({ Authorization: `Basic ${b64('admin:pw')}` });
  expect([basic.rejectUnauthorized, basic.servername]).toEqual([false, 'kubernetes']);
});

test('$KUBECONFIG merged as kubectl merges it: the first file to name a cluster, user, context or current-context wins; paths resolve per file', async () => {
  write('one/ca.crt', 'CA-ONE');
  write('two/ca.crt', 'CA-TWO');
  const first = write('one/config', { ...one({ token: 'first' }, { 'certificate-authority': 'ca.crt' }), 'current-context': '' });
  const second = write('two/config', {
    clusters: [
      { name: 'c', cluster: { server: 'https://shadowed' } },
      { name: 'd', cluster: { server: 'https://10.0.0.2', 'certificate-authority': 'ca.crt' } },
    ],
    users: [{ name: 'u', user: { token: 'shadowed' } }],
    contexts: [{ name: 'y', context: { cluster: 'd', user: 'u' } }],
    'current-context': 'y',
  });
  const kc = loadKubeConfig({}, { KUBECONFIG: [first, path.join(dir, 'missing'), second].join(path.delimiter), HOME: dir });
  expect(kc.server).toBe('https://10.0.0.2');
  const opts: https.RequestOptions = {};
  await kc.applyToHTTPSOptions(opts);
  expect([String(opts.ca), (opts.headers as Record<string, string>)['Authorization']]).toEqual(['CA-TWO', 'Bearer first']);
  expect(credentialsFromFiles([first, second], 'x').server).toBe('https://10.0.0.1:6443');
  expect(String((await applied([first, second], 'x')).ca)).toBe('CA-ONE');
});

test('an exec plugin: run with KUBERNETES_EXEC_INFO and its env; its token kept until it expires, then asked again', async () => {
  const count = path.join(dir, 'count');
  const plugin = (expires: string): string =>
    write(
      'bin/cred',
      `#!/bin/sh\necho x >> ${count}\napi=$(echo "$KUBERNETES_EXEC_INFO" | sed 's/.*"apiVersion":"\\([^"]*\\)".*/\\1/')\n` +
        `echo "{\\"apiVersion\\":\\"$api\\",\\"kind\\":\\"ExecCredential\\",\\"status\\":{\\"token\\":\\"$GREETING-$api\\"${expires}}}"\n`,
    );
  const exec = { apiVersion: 'client.authentication.k8s.io/v1beta1', command: './bin/cred', env: [{ name: 'GREETING', value: 'hi' }] };
  plugin(`,\\"expirationTimestamp\\":\\"${new Date(Date.now() + 3_600_000).toISOString()}\\"`);
  const kc = credentialsFromFiles([write('kc', one({ exec }))]);
  const auth = async (): Promise<string | undefined> => {
    const opts: https.RequestOptions = {};
    await kc.applyToHTTPSOptions(opts);
    return (opts.headers as Record<string, string>)['Authorization'];
  };
  expect(await auth()).toBe('Bearer hi-client.authentication.k8s.io/v1beta1');
  expect(await auth()).toBe('Bearer hi-client.authentication.k8s.io/v1beta1');
  expect(fs.readFileSync(count, 'utf8').split('\n').filter(Boolean)).toHaveLength(1);
  // expired on arrival: asked on every request
  plugin(`,\\"expirationTimestamp\\":\\"2020-01-01T00:00:00Z\\"`);
  const stale = credentialsFromFiles([write('kc2', one({ exec }))]);
  for (let i = 0; i < 2; i++) await stale.applyToHTTPSOptions({});
  expect(fs.readFileSync(count, 'utf8').split('\n').filter(Boolean)).toHaveLength(3);
  // a plugin that fails or prints no credential is the caller's error, naming the plugin
  write('bin/cred', '#!/bin/sh\necho "no token for you" >&2\nexit 3\n');
  await expect(credentialsFromFiles([write('kc3', one({ exec }))]).applyToHTTPSOptions({})).rejects.toThrow(
    /exec plugin \S*bin\/cred: exit status 3: no token for you$/,
  );
  write('bin/cred', '#!/bin/sh\necho "{\\"status\\":{}}"\n');
  await expect(credentialsFromFiles([write('kc4', one({ exec }))]).applyToHTTPSOptions({})).rejects.toThrow(
    /no token and no client certificate/,
  );
});

test('what cannot be honoured is refused with its name: auth-provider, proxy-url, a missing context or cluster', () => {
  expect(() => credentialsFromFiles([write('a', one({ 'auth-provider': { name: 'gcp' } }))])).toThrow(
    new KubeConfigError(`kubeconfig ${path.join(dir, 'a')}: auth-provider "gcp" is not supported; use an exec plugin`),
  );
  expect(() => credentialsFromFiles([write('b', one({}, { 'proxy-url': 'socks5://p:1080' }))])).toThrow(/proxy-url is not supported/);
  expect(() => credentialsFromFiles([write('c', one({}))], 'nope')).toThrow(/no context "nope"/);
  expect(() => credentialsFromFiles([write('d', { ...one({}), clusters: [] })])).toThrow(/no cluster "c" with a server/);
  expect(() => credentialsFromFiles([write('e', 'clusters: [')])).toThrow(KubeConfigError);
});

test("in a pod: the service account's token, CA and namespace; an IPv6 service host in brackets; no cluster, a clear error", async () => {
  const sa = path.join(dir, 'sa');
  fs.mkdirSync(sa);
  for (const [f, v] of Object.entries({ token: 'sa-token\n', 'ca.crt': 'SA-CA', namespace: 'kube-system' }))
    fs.writeFileSync(path.join(sa, f), v);
  const kc = inClusterCredentials({ KUBERNETES_SERVICE_HOST: 'fd00::1', KUBERNETES_SERVICE_PORT: '6443' }, sa);
  expect([kc.server, kc.namespace]).toEqual(['https://[fd00::1]:6443', 'kube-system']);
  const opts: https.RequestOptions = {};
  await kc.applyToHTTPSOptions(opts);
  expect([String(opts.ca), (opts.headers as Record<string, string>)['Authorization']]).toEqual(['SA-CA', 'Bearer sa-token']);
  // no kubeconfig anywhere and not in a pod
  expect(() => loadKubeConfig({}, { HOME: dir })).toThrow(/not in a cluster \(KUBERNETES_SERVICE_HOST unset\) and no kubeconfig given/);
  // ~/.kube/config before the service account
  write('.kube/config', one({ token: 'home' }));
  expect(loadKubeConfig({}, { HOME: dir, KUBERNETES_SERVICE_HOST: '10.96.0.1' }).server).toBe('https://10.0.0.1:6443');
});
