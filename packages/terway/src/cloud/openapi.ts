/**
 * Alibaba Cloud's OpenAPI, RPC style (ECS 2014-05-26, VPC 2016-04-28), spoken directly: what terway needs of it in
 * place of the official SDK, whose modules alone held ~110 MiB in terwayd. As Alibaba's "Request syntax and signature
 * method V3" documents it:
 *
 * - every parameter in the query string of a POST to `/`, lists and objects flattened the RPC way (`Name.1`,
 *   `Tag.1.Key`), the body empty;
 * - the action and version in the `x-acs-action` / `x-acs-version` headers, with `x-acs-date` (ISO 8601 UTC to the
 *   second), `x-acs-signature-nonce` and `x-acs-content-sha256` (hex SHA-256 of the body);
 * - signed ACS3-HMAC-SHA256: the canonical request (method, path, sorted query, `host`/`content-type`/`x-acs-*`
 *   headers, their names, the body's hash), its hex SHA-256 after the algorithm's name is the string to sign, whose
 *   hex HMAC-SHA256 under the AccessKey secret goes in `Authorization: ACS3-HMAC-SHA256 Credential=...,
 *   SignedHeaders=...,Signature=...`;
 * - JSON answers; an error is its HTTP status (4xx/5xx) with `{RequestId, HostId, Code, Message, Recommend}`.
 */
import { createHash, createHmac, randomBytes } from 'node:crypto';
import * as http from 'node:http';
import * as https from 'node:https';

export const SIGNATURE_ALGORITHM = 'ACS3-HMAC-SHA256';

export type ParamValue = string | number | boolean | undefined | readonly ParamValue[] | { readonly [k: string]: ParamValue };
export type Params = Record<string, ParamValue>;

/** RPC-style parameters: lists become `Name.1`, `Name.2`..., objects `Name.Key`, nested alike; undefined is left out. */
export function flattenParams(params: Params): Record<string, string> {
  const out: Record<string, string> = {};
  const put = (name: string, v: ParamValue): void => {
    if (v === undefined) return;
    if (Array.isArray(v)) (v as readonly ParamValue[]).forEach((x, i) => put(`${name}.${i + 1}`, x));
    else if (typeof v === 'object') for (const [k, x] of Object.entries(v)) put(`${name}.${k}`, x);
    else out[name] = String(v);
  };
  for (const [k, v] of Object.entries(params)) put(k, v);
  return out;
}

/** The signature's percent-encoding: UTF-8, RFC 3986, only the unreserved `A-Z a-z 0-9 - _ . ~` left as they are. */
export function percentEncode(s: string): string {
  return encodeURIComponent(s).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
}

/** CanonicalQueryString: names in ascending character order, `name=value` both encoded, joined by `&` ('' if none). */
export function canonicalQuery(query: Record<string, string>): string {
  return Object.keys(query)
    .sort()
    .map((k) => `${percentEncode(k)}=${percentEncode(query[k]!)}`)
    .join('&');
}

export function sha256Hex(data: string | Buffer): string {
  return createHash('sha256').update(data).digest('hex');
}

export interface Credentials {
  accessKeyId: string;
  accessKeySecret: string;
}

export interface SignInput {
  method: string;
  /** CanonicalURI: `/` for RPC-style APIs. */
  path: string;
  query: Record<string, string>;
  /** The headers the request carries; host, content-type and the x-acs-* ones are signed. */
  headers: Record<string, string>;
  body: string | Buffer;
}

export interface Signature {
  canonicalRequest: string;
  stringToSign: string;
  signedHeaders: string;
  signature: string;
  authorization: string;
}

/** The V3 signature of a request, each step kept so that a test can hold it against the documented algorithm. */
export function signV3(req: SignInput, cred: Credentials): Signature {
  const headers = Object.entries(req.headers)
    .map(([k, v]) => [k.toLowerCase(), v.trim()] as const)
    .filter(([k]) => k === 'host' || k === 'content-type' || k.startsWith('x-acs-'))
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  const signedHeaders = headers.map(([k]) => k).join(';');
  const canonicalRequest = [
    req.method.toUpperCase(),
    req.path,
    canonicalQuery(req.query),
    headers.map(([k, v]) => `${k}:${v}\n`).join(''),
    signedHeaders,
    sha256Hex(req.body),
  ].join('\n');
  const stringToSign = `${SIGNATURE_ALGORITHM}\n${sha256Hex(canonicalRequest)}`;
  const signature = createHmac('sha256', cred.accessKeySecret).update(stringToSign).digest('hex');
  const authorization = `${SIGNATURE_ALGORITHM} Credential=${cred.accessKeyId},SignedHeaders=${signedHeaders},Signature=${signature}`;
  return { canonicalRequest, stringToSign, signedHeaders, signature, authorization };
}

/** An answer with an HTTP error status: the API's Code, its RequestId, and the rest of the documented error body. */
export class OpenApiError extends Error {
  constructor(
    readonly code: string,
    readonly status: number,
    readonly requestId: string | undefined,
    message: string,
    readonly hostId?: string,
    readonly recommend?: string,
  ) {
    super(message);
    this.name = 'OpenApiError';
  }
}

/**
 * A failure before any answer: no keys to sign with (InvalidCredentials, as the SDK said), or the socket's (Node's
 * code: ECONNREFUSED, ECONNRESET...; ConnectTimeout, ReadTimeout).
 */
export class ClientError extends Error {
  constructor(
    readonly code: string,
    message: string,
    options?: { cause?: unknown; reusedSocket?: boolean },
  ) {
    super(message, options);
    this.name = 'ClientError';
    this.reusedSocket = options?.reusedSocket ?? false;
  }

  /** The request went out on a kept-alive socket (which the server may have closed meanwhile). */
  readonly reusedSocket: boolean;
}

export interface RpcClientOptions extends Credentials {
  /** host[:port]. */
  endpoint: string;
  /** The API version, e.g. 2014-05-26. */
  version: string;
  protocol?: 'http' | 'https';
  connectTimeoutMs?: number;
  /** How long the answer may keep us waiting (socket idle time). */
  readTimeoutMs?: number;
}

interface Answer {
  status: number;
  body: string;
}

/** One product's RPC API at one endpoint; connections kept alive between calls (a daemon calls all day). */
export class RpcClient {
  private readonly agent: http.Agent;

  constructor(private readonly o: RpcClientOptions) {
    this.agent = o.protocol === 'http' ? new http.Agent({ keepAlive: true }) : new https.Agent({ keepAlive: true });
  }

  /** Calls `action`; resolves to the JSON answer, rejects with OpenApiError (an error status) or ClientError. */
  async call(action: string, params: Params): Promise<Record<string, unknown>> {
    if (!this.o.accessKeyId || !this.o.accessKeySecret)
      throw new ClientError('InvalidCredentials', 'no AccessKey ID and secret to sign with (ALIBABA_CLOUD_ACCESS_KEY_ID / _SECRET)');
    const query = flattenParams(params);
    return parseAnswer(action, await this.send(action, query));
  }

  /**
   * POSTs the call; a kept-alive socket the server closed meanwhile (reset on reuse: the request never reached it)
   * is tried once more on a new one, signed anew (a nonce is good for one request).
   */
  private async send(action: string, query: Record<string, string>): Promise<Answer> {
    const qs = canonicalQuery(query);
    const path = `/${qs ? `?${qs}` : ''}`;
    try {
      return await this.request(path, this.signedHeaders(action, query));
    } catch (e) {
      if (!(e instanceof ClientError && e.code === 'ECONNRESET' && e.reusedSocket)) throw e;
      return await this.request(path, this.signedHeaders(action, query));
    }
  }

  /** The request's headers: the common ones, each signed, then Authorization and two that need no signing. */
  private signedHeaders(action: string, query: Record<string, string>): Record<string, string> {
    const headers: Record<string, string> = {
      host: this.o.endpoint,
      'x-acs-action': action,
      'x-acs-version': this.o.version,
      'x-acs-date': new Date().toISOString().replace(/\.\d+Z$/, 'Z'),
      // Unique per request: the API refuses a nonce it has seen (replay protection).
      'x-acs-signature-nonce': randomBytes(16).toString('hex'),
      'x-acs-content-sha256': sha256Hex(''),
    };
    const { authorization } = signV3({ method: 'POST', path: '/', query, headers, body: '' }, this.o);
    return { ...headers, authorization, accept: 'application/json', 'content-length': '0' };
  }

  private request(path: string, headers: Record<string, string>): Promise<Answer> {
    const { hostname, port } = splitHostPort(this.o.endpoint);
    const mod = this.o.protocol === 'http' ? http : https;
    return new Promise<Answer>((resolve, reject) => {
      const req = mod.request({ method: 'POST', hostname, port, path, headers, agent: this.agent }, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8') }));
        res.on('error', (e) => reject(transportError(e, req.reusedSocket)));
      });
      const connectTimer = setTimeout(
        () => req.destroy(new ClientError('ConnectTimeout', `no connection to ${this.o.endpoint} in ${this.connectMs} ms`)),
        this.connectMs,
      );
      req.on('socket', (s) => (s.connecting ? s.once('connect', () => clearTimeout(connectTimer)) : clearTimeout(connectTimer)));
      req.setTimeout(this.o.readTimeoutMs ?? 10_000, () =>
        req.destroy(new ClientError('ReadTimeout', `no answer from ${this.o.endpoint} in ${this.o.readTimeoutMs ?? 10_000} ms`)),
      );
      req.on('close', () => clearTimeout(connectTimer));
      req.on('error', (e) => reject(transportError(e, req.reusedSocket)));
      req.end();
    });
  }

  private get connectMs(): number {
    return this.o.connectTimeoutMs ?? 5000;
  }
}

function splitHostPort(endpoint: string): { hostname: string; port: number | undefined } {
  const m = /^\[?([^\]]+?)\]?(?::(\d+))?$/.exec(endpoint);
  return { hostname: m?.[1] ?? endpoint, port: m?.[2] ? Number(m[2]) : undefined };
}

function transportError(e: unknown, reused: boolean): ClientError {
  if (e instanceof ClientError) return e;
  const code = (e as { code?: unknown })?.code;
  const message = e instanceof Error ? e.message : String(e);
  return new ClientError(typeof code === 'string' ? code : 'NetworkError', message, { cause: e, reusedSocket: reused });
}

/** A 2xx JSON answer as it is; an error status as OpenApiError, its Code from the body (or `HTTP<status>` without one). */
function parseAnswer(action: string, a: Answer): Record<string, unknown> {
  let body: Record<string, unknown> | undefined;
  try {
    const j = JSON.parse(a.body) as unknown;
    if (j && typeof j === 'object' && !Array.isArray(j)) body = j as Record<string, unknown>;
  } catch {
    body = undefined;
  }
  const str = (k: string): string | undefined => (typeof body?.[k] === 'string' ? (body[k] as string) : undefined);
  if (a.status >= 200 && a.status < 300) {
    if (body) return body;
    throw new OpenApiError('InvalidResponse', a.status, undefined, `${action}: the answer is not a JSON object: ${a.body.slice(0, 200)}`);
  }
  const message = str('Message') ?? (a.body.slice(0, 200) || `HTTP ${a.status}`);
  throw new OpenApiError(str('Code') ?? `HTTP${a.status}`, a.status, str('RequestId'), message, str('HostId'), str('Recommend'));
}
