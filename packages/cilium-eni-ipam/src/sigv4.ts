/**
 * AWS Signature Version 4 for one request, header form (an Authorization header), as the IAM User Guide's
 * "Create a signed AWS API request" describes it: canonical request -> string to sign -> HMAC chain of
 * date/region/service/"aws4_request" -> signature. Only what EC2's Query API needs: the path is "/" or
 * already canonical, the query string is already sorted and encoded (EC2 requests carry their parameters in
 * the body), the payload is hashed whole.
 */
import { createHash, createHmac } from 'node:crypto';

export interface AwsCredentials {
  accessKeyId: string;
  secretAccessKey: string;
  /** Temporary credentials (STS, an instance role) come with one; it is sent as x-amz-security-token. */
  sessionToken?: string;
}

export interface SignInput {
  method: string;
  /** host[:port], as the Host header will carry it. */
  host: string;
  path: string;
  /** Canonical query string (sorted, encoded), '' for none. */
  query?: string;
  /** Headers to sign besides host, x-amz-date and x-amz-security-token. */
  headers?: Record<string, string>;
  body: string;
}

export interface SignScope {
  region: string;
  service: string;
  now: Date;
}

const sha256 = (s: string): string => createHash('sha256').update(s, 'utf8').digest('hex');
const hmac = (key: Buffer | string, s: string): Buffer => createHmac('sha256', key).update(s, 'utf8').digest();

/** 20150830T123600Z: ISO 8601 basic format, seconds precision, UTC. */
export const amzDate = (d: Date): string =>
  d
    .toISOString()
    .replace(/[-:]/g, '')
    .replace(/\.\d{3}/, '');

/** The signing key: each step keys the next HMAC with the previous one's raw bytes. */
export function signingKey(secret: string, date: string, region: string, service: string): Buffer {
  return hmac(hmac(hmac(hmac(`AWS4${secret}`, date), region), service), 'aws4_request');
}

/**
 * Headers names lower-cased and sorted, values trimmed with inner runs of spaces folded: both sides must
 * derive the same text from whatever a proxy passes along.
 */
function canonicalHeaders(headers: Record<string, string>): { text: string; names: string } {
  const list = Object.entries(headers)
    .map(([k, v]) => [k.toLowerCase(), v.trim().replace(/\s+/g, ' ')] as const)
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return { text: list.map(([k, v]) => `${k}:${v}\n`).join(''), names: list.map(([k]) => k).join(';') };
}

export function canonicalRequest(req: SignInput, headers: Record<string, string>): { text: string; signedHeaders: string } {
  const h = canonicalHeaders(headers);
  const text = [req.method, req.path, req.query ?? '', h.text, h.names, sha256(req.body)].join('\n');
  return { text, signedHeaders: h.names };
}

/** The headers to add to the request: x-amz-date, x-amz-security-token when there is one, authorization. */
export function signV4(req: SignInput, creds: AwsCredentials, scope: SignScope): Record<string, string> {
  const date = amzDate(scope.now);
  const added: Record<string, string> = { 'x-amz-date': date };
  if (creds.sessionToken) added['x-amz-security-token'] = creds.sessionToken;
  const { text, signedHeaders } = canonicalRequest(req, { ...req.headers, host: req.host, ...added });
  const credScope = `${date.slice(0, 8)}/${scope.region}/${scope.service}/aws4_request`;
  const toSign = ['AWS4-HMAC-SHA256', date, credScope, sha256(text)].join('\n');
  const key = signingKey(creds.secretAccessKey, date.slice(0, 8), scope.region, scope.service);
  const signature = hmac(key, toSign).toString('hex');
  added.authorization = `AWS4-HMAC-SHA256 Credential=${creds.accessKeyId}/${credScope}, SignedHeaders=${signedHeaders}, Signature=${signature}`;
  return added;
}
