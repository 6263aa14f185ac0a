/**
 * Credentials for the API server, found where client-go finds them: a kubeconfig file given by path, else the files
 * of $KUBECONFIG (merged: the first file to define a name wins), else ~/.kube/config, else the pod's service account
 * (KUBERNETES_SERVICE_HOST and /var/run/secrets/kubernetes.io/serviceaccount). A user authenticates with a client
 * certificate, a bearer token or token file, a username and password, or an exec plugin (ExecCredential, as EKS and
 * GKE kubeconfigs use); the legacy auth-provider section is refused with a message naming it.
 *
 * Written here rather than taken from @kubernetes/client-node's KubeConfig: that class brings the generated API,
 * undici and ws into every daemon's bundle, 35 MiB of resident memory per process for reading one YAML file
 * (docs/kube.md, "Credentials").
 */
import type { ExecFileException } from 'node:child_process';
import * as fs from 'node:fs';
import type * as https from 'node:https';
import * as os from 'node:os';
import * as path from 'node:path';
import { KubeConfigError } from './errors';
import { KubeTransport, type TransportOptions } from './transport';

export interface ConnectOptions extends TransportOptions {
  /** Path of a kubeconfig file. Default: $KUBECONFIG, ~/.kube/config, then the pod's service account. */
  kubeconfig?: string;
  /** Context to use instead of the file's current-context. */
  context?: string;
}

/** The kubeconfig sections read here (kubectl's names). */
export interface KubeconfigDoc {
  clusters?: { name: string; cluster: KubeconfigCluster }[];
  users?: { name: string; user: KubeconfigUser }[];
  contexts?: { name: string; context: { cluster: string; user?: string; namespace?: string } }[];
  'current-context'?: string;
}
interface KubeconfigCluster {
  server: string;
  'certificate-authority'?: string;
  'certificate-authority-data'?: string;
  'insecure-skip-tls-verify'?: boolean;
  'tls-server-name'?: string;
  /** Refused: requests would otherwise go around the proxy. */
  'proxy-url'?: string;
}
interface KubeconfigUser {
  'client-certificate'?: string;
  'client-certificate-data'?: string;
  'client-key'?: string;
  'client-key-data'?: string;
  token?: string;
  tokenFile?: string;
  username?: string;
  password?: string;
  exec?: ExecConfig;
  'auth-provider'?: { name?: string };
}
interface ExecConfig {
  apiVersion?: string;
  command: string;
  args?: string[];
  env?: { name: string; value: string }[] | null;
}

/** What a user presents: fixed TLS material and headers, or what an exec plugin or token file gives at the time. */
interface Presented {
  cert?: Buffer;
  key?: Buffer;
  token?: string;
  basic?: string;
}

/** The API server to talk to and how; what the transport applies to every request. */
export class KubeCredentials {
  constructor(
    readonly server: string,
    private readonly tls: { ca?: Buffer; insecure: boolean; serverName?: string },
    private readonly present: () => Promise<Presented>,
    /** The namespace of the context (the service account's in a pod), "default" when none is named. */
    readonly namespace: string,
  ) {}

  /** The same credentials against another server address (a proxy in front of the API server, in tests). */
  withServer(server: string): KubeCredentials {
    return new KubeCredentials(server, this.tls, this.present, this.namespace);
  }

  /** TLS material and the Authorization header onto a request's options. */
  async applyToHTTPSOptions(opts: https.RequestOptions): Promise<void> {
    if (this.tls.ca) opts.ca = this.tls.ca;
    opts.rejectUnauthorized = !this.tls.insecure;
    if (this.tls.serverName) opts.servername = this.tls.serverName;
    const p = await this.present();
    if (p.cert) opts.cert = p.cert;
    if (p.key) opts.key = p.key;
    const headers = (opts.headers ??= {}) as Record<string, string>;
    if (p.token) headers['Authorization'] = `Bearer ${p.token}`;
    else if (p.basic) headers['Authorization'] = `Basic ${p.basic}`;
  }
}

/** Reads a file a kubeconfig names, relative to the kubeconfig's own directory. */
const fileIn = (dir: string, f: string): Buffer => fs.readFileSync(path.resolve(dir, f));
const material = (dir: string, data: string | undefined, file: string | undefined): Buffer | undefined =>
  data ? Buffer.from(data, 'base64') : file ? fileIn(dir, file) : undefined;

/** A token file is read again at most every 10 s: service-account tokens are rotated in place. */
function tokenFileReader(file: string): () => string {
  let cached: { token: string; at: number } | undefined;
  return () => {
    if (!cached || Date.now() - cached.at > 10_000) cached = { token: fs.readFileSync(file, 'utf8').trim(), at: Date.now() };
    return cached.token;
  };
}

/** The credentials of a parsed kubeconfig; `dir` resolves the relative paths in it. */
export function credentialsFromDoc(doc: KubeconfigDoc, dir: string, context?: string, source = 'kubeconfig'): KubeCredentials {
  const ctxName = context ?? doc['current-context'];
  const ctx = doc.contexts?.find((c) => c.name === ctxName)?.context;
  if (!ctx) throw new KubeConfigError(`${source}: ${ctxName ? `no context "${ctxName}"` : 'no current-context'}`);
  const cluster = doc.clusters?.find((c) => c.name === ctx.cluster)?.cluster;
  if (!cluster?.server) throw new KubeConfigError(`${source}: no cluster "${ctx.cluster}" with a server`);
  if (cluster['proxy-url']) throw new KubeConfigError(`${source}: cluster "${ctx.cluster}": proxy-url is not supported`);
  const user = (ctx.user ? doc.users?.find((u) => u.name === ctx.user)?.user : undefined) ?? {};
  const tls = {
    ca: material(dir, cluster['certificate-authority-data'], cluster['certificate-authority']),
    insecure: cluster['insecure-skip-tls-verify'] === true,
    ...(cluster['tls-server-name'] ? { serverName: cluster['tls-server-name'] } : {}),
  };
  return new KubeCredentials(cluster.server, tls, userPresents(user, dir, source, cluster), ctx.namespace || 'default');
}

function userPresents(user: KubeconfigUser, dir: string, source: string, cluster: KubeconfigCluster): () => Promise<Presented> {
  if (user['auth-provider'])
    throw new KubeConfigError(`${source}: auth-provider "${user['auth-provider'].name ?? ''}" is not supported; use an exec plugin`);
  const fixed: Presented = {};
  const cert = material(dir, user['client-certificate-data'], user['client-certificate']);
  const key = material(dir, user['client-key-data'], user['client-key']);
  if (cert) fixed.cert = cert;
  if (key) fixed.key = key;
  if (user.token) fixed.token = user.token;
  else if (user.username !== undefined) fixed.basic = Buffer.from(`${user.username}:${user.password ?? ''}`).toString('base64');
  if (user.exec) {
    const exec = execPlugin(user.exec, dir, cluster);
    return async () => ({ ...fixed, ...(await exec()) });
  }
  if (!user.token && user.tokenFile) {
    const read = tokenFileReader(path.resolve(dir, user.tokenFile));
    return async () => ({ ...fixed, token: read() });
  }
  return async () => fixed;
}

/**
 * An exec credential plugin (client.authentication.k8s.io): run with KUBERNETES_EXEC_INFO, its ExecCredential's
 * token or client certificate kept until its expirationTimestamp (for good when it has none), then run again.
 */
function execPlugin(exec: ExecConfig, dir: string, cluster: KubeconfigCluster): () => Promise<Presented> {
  const apiVersion = exec.apiVersion ?? 'client.authentication.k8s.io/v1';
  let cached: { presented: Presented; until: number } | undefined;
  // a command with a slash is relative to the kubeconfig (client-go), a bare one is looked up in PATH
  const command = exec.command.includes('/') ? path.resolve(dir, exec.command) : exec.command;
  return async () => {
    if (cached && Date.now() < cached.until) return cached.presented;
    const info = { apiVersion, kind: 'ExecCredential', spec: { interactive: false, cluster: { server: cluster.server } } };
    const env = {
      ...process.env,
      ...Object.fromEntries((exec.env ?? []).map((e) => [e.name, e.value])),
      KUBERNETES_EXEC_INFO: JSON.stringify(info),
    };
    // required here: a CNI call reading a kubeconfig without exec never loads child_process
    const { execFile } = require('node:child_process') as typeof import('node:child_process');
    const out = await new Promise<string>((resolve, reject) =>
      execFile(command, exec.args ?? [], { env, timeout: 60_000 }, (err: ExecFileException | null, stdout: string, stderr: string) => {
        if (!err) return resolve(stdout);
        const why = err.killed ? 'no answer within 60 s' : typeof err.code === 'number' ? `exit status ${err.code}` : err.message;
        reject(new KubeConfigError(`exec plugin ${exec.command}: ${why}${stderr.trim() ? `: ${stderr.trim()}` : ''}`, { cause: err }));
      }),
    );
    let status: { token?: string; clientCertificateData?: string; clientKeyData?: string; expirationTimestamp?: string };
    try {
      status = (JSON.parse(out) as { status?: typeof status }).status ?? {};
    } catch (err) {
      throw new KubeConfigError(`exec plugin ${exec.command}: its output is no ExecCredential`, { cause: err });
    }
    const presented: Presented = {
      ...(status.token ? { token: status.token } : {}),
      ...(status.clientCertificateData ? { cert: Buffer.from(status.clientCertificateData) } : {}),
      ...(status.clientKeyData ? { key: Buffer.from(status.clientKeyData) } : {}),
    };
    if (!presented.token && !presented.cert)
      throw new KubeConfigError(`exec plugin ${exec.command}: no token and no client certificate in its status`);
    const until = status.expirationTimestamp ? Date.parse(status.expirationTimestamp) : Infinity;
    cached = { presented, until: Number.isNaN(until) ? 0 : until };
    return presented;
  };
}

/** The path-valued fields of clusters and users, resolved against their own file's directory when merging. */
const PATH_FIELDS = ['certificate-authority', 'client-certificate', 'client-key', 'tokenFile'];

/** One kubeconfig item (a cluster or user entry) with its relative paths made absolute. */
function absolute<T extends { name: string }>(item: T, dir: string): T {
  const out = { ...item } as Record<string, unknown>;
  for (const [k, v] of Object.entries(item)) {
    if (k === 'name' || typeof v !== 'object' || v === null) continue;
    const body = { ...(v as Record<string, unknown>) };
    for (const f of PATH_FIELDS) if (typeof body[f] === 'string') body[f] = path.resolve(dir, body[f]);
    const exec = body['exec'] as ExecConfig | undefined;
    if (exec?.command.includes('/')) body['exec'] = { ...exec, command: path.resolve(dir, exec.command) };
    out[k] = body;
  }
  return out as T;
}

/** Kubeconfig files merged as kubectl merges $KUBECONFIG: the first file to define a name (or current-context) wins. */
export function credentialsFromFiles(files: string[], context?: string): KubeCredentials {
  const { load } = require('js-yaml') as typeof import('js-yaml');
  const doc: KubeconfigDoc = { clusters: [], users: [], contexts: [] };
  for (const file of files) {
    let one: KubeconfigDoc;
    try {
      one = (load(fs.readFileSync(file, 'utf8')) ?? {}) as KubeconfigDoc;
    } catch (err) {
      throw new KubeConfigError(`kubeconfig ${file}: ${(err as Error).message}`, { cause: err });
    }
    for (const key of ['clusters', 'users', 'contexts'] as const) {
      const into = doc[key] as { name: string }[];
      for (const item of (one[key] ?? []) as { name: string }[])
        if (!into.some((x) => x.name === item.name)) into.push(absolute(item, path.dirname(file)));
    }
    doc['current-context'] ||= one['current-context'];
  }
  return credentialsFromDoc(doc, '.', context, `kubeconfig ${files.join(path.delimiter)}`);
}

const SERVICE_ACCOUNT = '/var/run/secrets/kubernetes.io/serviceaccount';

/** The API server a pod is given: `https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT`, an IPv6 host in brackets. */
export function inClusterServer(env: NodeJS.ProcessEnv = process.env): string {
  const host = env.KUBERNETES_SERVICE_HOST;
  if (!host) throw new KubeConfigError('not in a cluster (KUBERNETES_SERVICE_HOST unset) and no kubeconfig given');
  return `https://${host.includes(':') ? `[${host}]` : host}:${env.KUBERNETES_SERVICE_PORT ?? '443'}`;
}

/** The pod's own credentials: inClusterServer(), the service account's token (re-read as it rotates) and CA. */
export function inClusterCredentials(env: NodeJS.ProcessEnv = process.env, saDir = SERVICE_ACCOUNT): KubeCredentials {
  const server = inClusterServer(env);
  const read = tokenFileReader(path.join(saDir, 'token'));
  const nsFile = path.join(saDir, 'namespace');
  const namespace = fs.existsSync(nsFile) ? fs.readFileSync(nsFile, 'utf8').trim() : 'default';
  return new KubeCredentials(
    server,
    { ca: fs.readFileSync(path.join(saDir, 'ca.crt')), insecure: false },
    async () => ({ token: read() }),
    namespace,
  );
}

/** The credentials client-go would use: the file given, $KUBECONFIG, ~/.kube/config, then the service account. */
export function loadKubeConfig(
  opts: Pick<ConnectOptions, 'kubeconfig' | 'context'> = {},
  env: NodeJS.ProcessEnv = process.env,
): KubeCredentials {
  if (opts.kubeconfig) return credentialsFromFiles([opts.kubeconfig], opts.context);
  const listed = (env.KUBECONFIG ?? '').split(path.delimiter).filter((f) => f !== '' && fs.existsSync(f));
  if (listed.length) return credentialsFromFiles(listed, opts.context);
  const home = path.join(env.HOME ?? os.homedir(), '.kube', 'config');
  if (fs.existsSync(home)) return credentialsFromFiles([home], opts.context);
  return inClusterCredentials(env);
}

/** A transport for the configured cluster. */
export function connect(opts: ConnectOptions = {}): KubeTransport {
  return new KubeTransport(loadKubeConfig(opts), opts);
}

/** The namespace of the current context ("default" when it names none). */
export function currentNamespace(kc: KubeCredentials): string {
  return kc.namespace;
}
