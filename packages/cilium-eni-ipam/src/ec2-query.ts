/**
 * EC2's Query API, spoken directly (in place of @aws-sdk/client-ec2, whose loading alone took ~95 MiB of the
 * operator's memory): an HTTPS POST of form-encoded `Action`, `Version` and the action's parameters, signed
 * with Signature Version 4 (service "ec2"), answered with XML. One attempt per call: retries and rate
 * limiting are the caller's (ec2.ts), so that each attempt is counted there.
 */
import * as http from 'node:http';
import * as https from 'node:https';
import type { CredentialSource } from './aws-credentials';
import { send } from './http-send';
import { signV4 } from './sigv4';
import { child, parseXml, textAt, type XmlElement } from './xml';

export const EC2_API_VERSION = '2016-11-15';

/** A request's parameters, already flattened to EC2's names (Filter.1.Name...); undefined ones are left out. */
export type QueryParams = Record<string, string | number | boolean | undefined>;

/** An error EC2 answered: its code (RequestLimitExceeded...), message, HTTP status and request ID. */
export class Ec2QueryError extends Error {
  override name = 'Ec2QueryError';
  constructor(
    readonly code: string,
    message: string,
    readonly status: number,
    readonly requestId?: string,
  ) {
    super(message);
  }
}

/** `prefix.1`, `prefix.2`, ... for a list of scalars (PrivateIpAddress.N, SecurityGroupId.N, ResourceId.N). */
export function listParams(prefix: string, values: readonly string[]): QueryParams {
  return Object.fromEntries(values.map((v, i) => [`${prefix}.${i + 1}`, v]));
}

/** `Filter.N.Name` and `Filter.N.Value.M`. */
export function filterParams(filters: readonly { name: string; values: readonly string[] }[]): QueryParams {
  const out: QueryParams = {};
  filters.forEach((f, i) => {
    out[`Filter.${i + 1}.Name`] = f.name;
    Object.assign(out, listParams(`Filter.${i + 1}.Value`, f.values));
  });
  return out;
}

/** `prefix.N.Key` and `prefix.N.Value` (Tag.N for CreateTags, TagSpecification.1.Tag.N for a create). */
export function tagParams(prefix: string, tags: Record<string, string>): QueryParams {
  const out: QueryParams = {};
  Object.entries(tags).forEach(([k, v], i) => {
    out[`${prefix}.${i + 1}.Key`] = k;
    out[`${prefix}.${i + 1}.Value`] = v;
  });
  return out;
}

/** RFC 3986 percent-encoding, as SigV4 and EC2 expect it (encodeURIComponent leaves !'()* alone). */
const enc = (s: string): string => encodeURIComponent(s).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);

/** The form body of a Query API request (EC2's version unless told: STS speaks the same protocol). */
export function formBody(action: string, params: QueryParams, version = EC2_API_VERSION): string {
  const all: QueryParams = { Action: action, Version: version, ...params };
  return Object.entries(all)
    .filter(([, v]) => v !== undefined)
    .map(([k, v]) => `${enc(k)}=${enc(String(v))}`)
    .join('&');
}

/** The region's public endpoint (China's regions are under amazonaws.com.cn). */
export const regionEndpoint = (region: string): string => `https://ec2.${region}.amazonaws.com${region.startsWith('cn-') ? '.cn' : ''}/`;

/** EC2's error document (`Response/Errors/Error/{Code,Message}`, `RequestID`) as an Ec2QueryError. */
export function errorFromAnswer(status: number, body: string, headerRequestId?: string): Ec2QueryError {
  let doc: XmlElement | undefined;
  try {
    doc = parseXml(body);
  } catch {
    // Not EC2's XML (a proxy's or load balancer's page): the status alone says what happened.
  }
  const err = child(child(doc, 'Errors'), 'Error') ?? child(doc, 'Error');
  const code = textAt(err, 'Code') ?? `Http${status}`;
  const message = textAt(err, 'Message') ?? `HTTP ${status} ${body.replace(/\s+/g, ' ').trim().slice(0, 120)}`.trim();
  const requestId = textAt(doc, 'RequestID') ?? textAt(doc, 'RequestId') ?? headerRequestId;
  return new Ec2QueryError(code, message, status, requestId);
}

export interface Ec2QueryOptions {
  region: string;
  /** Endpoint override (moto, a proxy); default: the region's. */
  endpoint?: string;
  credentials: CredentialSource;
  now?: () => Date;
}

export class Ec2QueryClient {
  readonly url: URL;
  private readonly agent: http.Agent;

  constructor(private readonly o: Ec2QueryOptions) {
    this.url = new URL(o.endpoint ?? regionEndpoint(o.region));
    const Agent = this.url.protocol === 'https:' ? https.Agent : http.Agent;
    this.agent = new Agent({ keepAlive: true, maxSockets: 50 });
  }

  /** One signed attempt of `action`: the answer's root element, or an Ec2QueryError with EC2's code and status. */
  async request(action: string, params: QueryParams, signal?: AbortSignal): Promise<XmlElement> {
    const body = formBody(action, params);
    const headers: Record<string, string> = { 'content-type': 'application/x-www-form-urlencoded; charset=utf-8' };
    const creds = await this.o.credentials();
    const signed = signV4({ method: 'POST', host: this.url.host, path: this.url.pathname || '/', query: '', headers, body }, creds, {
      region: this.o.region,
      service: 'ec2',
      now: this.o.now?.() ?? new Date(),
    });
    const r = await send(this.url, { method: 'POST', headers: { ...headers, ...signed }, body, signal, agent: this.agent });
    if (r.status < 200 || r.status >= 300) throw errorFromAnswer(r.status, r.body, r.headers['x-amzn-requestid'] as string | undefined);
    return parseXml(r.body);
  }

  /** Closes idle keep-alive connections (doctor's one-shot read must not keep its process alive). */
  destroy(): void {
    this.agent.destroy();
  }
}
