/**
 * HTTP(S) transport to the API server. Authentication, TLS material and the server address come from
 * KubeCredentials (kubeconfig.ts: kubeconfig files, the pod's service account, token, certificate and exec
 * credentials); requests go over Node's http/https with one keep-alive agent per transport, so connections are
 * reused and a watch is a plain streaming response the kit reads line by line.
 */
import * as http from 'node:http';
import * as https from 'node:https';
import { StringDecoder } from 'node:string_decoder';
import { AbortedError, ApiError, KubeConfigError, TransportError, type ApiStatus } from './errors';
import type { KubeCredentials } from './kubeconfig';

export type Query = Record<string, string | number | boolean | undefined>;

export interface RequestOptions {
  query?: Query;
  /** JSON-encoded unless it is a string. */
  body?: unknown;
  /** Default application/json when there is a body. */
  contentType?: string;
  signal?: AbortSignal;
  /** Whole-request timeout; default the transport's (30 s). */
  timeoutMs?: number;
}

export interface StreamOptions {
  query?: Query;
  signal?: AbortSignal;
  /** Socket idle timeout: a stream silent this long is treated as broken. */
  idleTimeoutMs?: number;
}

/** Observes every request (metrics): method, status (0 on transport failure), seconds. */
export type RequestObserver = (method: string, status: number, seconds: number) => void;

export interface TransportOptions {
  /** Default per-request timeout (ms). Default 30 000. */
  timeoutMs?: number;
  /** User-Agent header. */
  userAgent?: string;
  observer?: RequestObserver;
}

/** What the transport needs of credentials. */
type KubeConfigLike = Pick<KubeCredentials, 'server' | 'applyToHTTPSOptions'>;

export class KubeTransport {
  readonly server: URL;
  private readonly kc: KubeConfigLike;
  private readonly timeoutMs: number;
  private readonly userAgent: string;
  private agent: http.Agent | undefined;
  private readonly openStreams = new Set<http.ClientRequest>();
  observer: RequestObserver | undefined;

  constructor(kc: KubeConfigLike, opts: TransportOptions = {}) {
    this.server = new URL(kc.server);
    this.kc = kc;
    this.timeoutMs = opts.timeoutMs ?? 30_000;
    this.userAgent = opts.userAgent ?? 'cnikit-kube';
    this.observer = opts.observer;
  }

  /** GET/POST/PUT/PATCH/DELETE returning the parsed JSON body; failures throw ApiError or TransportError. */
  async request<T>(method: string, path: string, opts: RequestOptions = {}): Promise<T> {
    const { status, text } = await this.exchange(method, path, opts);
    if (status >= 400) throw new ApiError(method, path, status, parseStatus(text));
    return (text === '' ? undefined : JSON.parse(text)) as T;
  }

  /**
   * The response whatever its HTTP status (client-go's RESTClient Do().StatusCode()): for callers that act on
   * the status itself, such as tests asserting a 201 or a 409. A body that is not JSON (the server's "404 page
   * not found" while a CRD is being established) comes back as { text }. Transport failures still throw.
   */
  async requestRaw<T = Record<string, unknown>>(
    method: string,
    path: string,
    opts: RequestOptions = {},
  ): Promise<{ status: number; body: T }> {
    const { status, text } = await this.exchange(method, path, opts);
    let body: unknown = {};
    try {
      if (text !== '') body = JSON.parse(text);
    } catch {
      body = { text };
    }
    return { status, body: body as T };
  }

  /** One request: its status and body text, observed (metrics) whatever the outcome. */
  private async exchange(method: string, path: string, opts: RequestOptions): Promise<{ status: number; text: string }> {
    const started = process.hrtime.bigint();
    const body = opts.body === undefined ? undefined : typeof opts.body === 'string' ? opts.body : JSON.stringify(opts.body);
    const headers: Record<string, string> = { Accept: 'application/json', 'User-Agent': this.userAgent };
    if (body !== undefined) {
      headers['Content-Type'] = opts.contentType ?? 'application/json';
      headers['Content-Length'] = String(Buffer.byteLength(body));
    }
    let status = 0;
    try {
      const res = await this.send(method, path, opts.query, headers, body, opts.signal, opts.timeoutMs ?? this.timeoutMs, false);
      status = res.statusCode ?? 0;
      const text = await readAll(res).catch((err: unknown) => {
        throw new TransportError(method, path, err);
      });
      return { status, text };
    } finally {
      this.observer?.(method, status, Number(process.hrtime.bigint() - started) / 1e9);
    }
  }

  /**
   * Opens a streaming GET (a watch) and yields its newline-delimited lines. Ends when the server closes the
   * response; throws TransportError when the connection breaks, ApiError when the server refuses the request.
   */
  async *streamLines(path: string, opts: StreamOptions = {}): AsyncGenerator<string> {
    const headers = { Accept: 'application/json', 'User-Agent': this.userAgent };
    const res = await this.send('GET', path, opts.query, headers, undefined, opts.signal, opts.idleTimeoutMs ?? 0, true);
    if ((res.statusCode ?? 0) >= 400) {
      const text = await readAll(res).catch(() => '');
      throw new ApiError('GET', path, res.statusCode ?? 0, parseStatus(text));
    }
    const decoder = new StringDecoder('utf8');
    let buf = '';
    try {
      for await (const chunk of res) {
        buf += decoder.write(chunk as Buffer);
        let nl: number;
        while ((nl = buf.indexOf('\n')) >= 0) {
          const line = buf.slice(0, nl).trim();
          buf = buf.slice(nl + 1);
          if (line !== '') yield line;
        }
      }
    } catch (err) {
      if (opts.signal?.aborted) throw new AbortedError(`GET ${path}`, { cause: err });
      throw new TransportError('GET', path, err);
    } finally {
      res.destroy();
    }
    if (opts.signal?.aborted) throw new AbortedError(`GET ${path}`);
    const rest = (buf + decoder.end()).trim();
    if (rest !== '') yield rest;
  }

  /** Destroys every open stream (watches) as if the network dropped them; used by tests and on shutdown. */
  dropStreams(): void {
    for (const req of this.openStreams) req.destroy(new Error('stream dropped'));
  }

  /** Closes idle keep-alive connections. */
  close(): void {
    this.dropStreams();
    this.agent?.destroy();
    this.agent = undefined;
  }

  private async send(
    method: string,
    path: string,
    query: Query | undefined,
    headers: Record<string, string>,
    body: string | undefined,
    signal: AbortSignal | undefined,
    timeoutMs: number,
    stream: boolean,
  ): Promise<http.IncomingMessage> {
    const url = new URL(path, this.server);
    for (const [k, v] of Object.entries(query ?? {})) if (v !== undefined) url.searchParams.set(k, String(v));
    const opts: https.RequestOptions = { method, headers: { ...headers } };
    try {
      await this.kc.applyToHTTPSOptions(opts);
    } catch (err) {
      throw new KubeConfigError(`credentials for ${this.server.host}: ${(err as Error).message}`, { cause: err });
    }
    const tls = url.protocol === 'https:';
    opts.agent = this.keepAliveAgent(tls, opts);
    if (signal?.aborted) throw new AbortedError(`${method} ${url.pathname}`);
    return new Promise((resolve, reject) => {
      const req = (tls ? https : http).request(url, opts, (res) => {
        if (!stream) clearTimer();
        resolve(res);
      });
      let timer: NodeJS.Timeout | undefined;
      const clearTimer = (): void => {
        if (timer) clearTimeout(timer);
        timer = undefined;
      };
      const onAbort = (): void => {
        req.destroy(new AbortedError(`${method} ${url.pathname}`));
      };
      signal?.addEventListener('abort', onAbort, { once: true });
      if (stream) {
        this.openStreams.add(req);
        if (timeoutMs > 0) req.setTimeout(timeoutMs, () => req.destroy(new Error(`no data for ${timeoutMs} ms`)));
      } else if (timeoutMs > 0) {
        timer = setTimeout(() => req.destroy(new Error(`timeout after ${timeoutMs} ms`)), timeoutMs);
      }
      req.on('close', () => {
        clearTimer();
        this.openStreams.delete(req);
        signal?.removeEventListener('abort', onAbort);
      });
      req.on('error', (err) => {
        clearTimer();
        reject(err instanceof AbortedError ? err : new TransportError(method, url.pathname, err));
      });
      req.end(body);
    });
  }

  private keepAliveAgent(tls: boolean, opts: https.RequestOptions): http.Agent {
    if (!this.agent) {
      this.agent = tls
        ? new https.Agent({
            keepAlive: true,
            ca: opts.ca,
            cert: opts.cert,
            key: opts.key,
            pfx: opts.pfx,
            passphrase: opts.passphrase,
            ...(opts.rejectUnauthorized !== undefined ? { rejectUnauthorized: opts.rejectUnauthorized } : {}),
            ...(opts.servername ? { servername: opts.servername } : {}),
          })
        : new http.Agent({ keepAlive: true });
    }
    return this.agent;
  }
}

function readAll(res: http.IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    res.on('data', (c: Buffer) => chunks.push(c));
    res.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    res.on('error', reject);
    res.on('aborted', () => reject(new Error('response aborted')));
  });
}

function parseStatus(text: string): ApiStatus | string {
  try {
    const v = JSON.parse(text) as ApiStatus;
    return v && typeof v === 'object' ? v : text;
  } catch {
    return text;
  }
}
