/**
 * One HTTP(S) exchange with node:http/node:https, the body read whole. Not fetch(): loading undici costs the
 * operator several MiB of resident memory for the few plain requests it makes to EC2 and IMDS.
 */
import * as http from 'node:http';
import * as https from 'node:https';

export interface HttpAnswer {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: string;
}

export interface SendOptions {
  method: string;
  headers?: Record<string, string>;
  body?: string;
  signal?: AbortSignal;
  /** Keep-alive agent of the caller (http.Agent for http:, https.Agent for https:). */
  agent?: http.Agent;
}

/** A network error as Node names a reset connection, so that callers retry it as one. */
const cut = (): Error => Object.assign(new Error('connection closed before the answer ended'), { code: 'ECONNRESET' });

export function send(url: URL, o: SendOptions): Promise<HttpAnswer> {
  const mod = url.protocol === 'https:' ? https : http;
  const body = o.body === undefined ? undefined : Buffer.from(o.body, 'utf8');
  const headers = { ...o.headers, ...(body ? { 'content-length': String(body.length) } : {}) };
  return new Promise((resolve, reject) => {
    const req = mod.request(url, { method: o.method, headers, agent: o.agent, signal: o.signal }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('error', reject);
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks).toString('utf8') }));
      // A connection cut mid-body (or an abort after the headers) must not leave the call pending forever.
      res.on('close', () => {
        if (!res.complete) reject(o.signal?.aborted ? (o.signal.reason ?? new Error('aborted')) : cut());
      });
    });
    req.on('error', (err) => reject(o.signal?.aborted ? (o.signal.reason ?? err) : err));
    req.end(body);
  });
}
