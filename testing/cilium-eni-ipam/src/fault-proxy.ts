/**
 * A fault-injecting HTTP proxy in front of an EC2 endpoint (moto): reads each request's `Action`, then adds
 * latency and answers some calls with EC2's own error format (XML `Response/Errors/Error/{Code,Message}`,
 * `RequestID`; 503 for RequestLimitExceeded, 500 for InternalError, 400 for client errors) instead of
 * forwarding them. Counts every call by action.
 */
import * as http from 'node:http';
import type { AddressInfo } from 'node:net';

export interface FaultRule {
  /** EC2 action name, or '*' for all. */
  action: string;
  /** EC2 error code to answer with (RequestLimitExceeded, InternalError, InsufficientCidrBlocks, ...). */
  code?: string;
  /** HTTP status; default by code (503 throttling, 500 internal, else 400). */
  status?: number;
  /** Fail this many matching calls, then pass (default: unlimited while the rule is installed). */
  times?: number;
  /**
   * Fail one matching call in this many (the 1st, the (1+every)th, ...) instead of all of them: throttling
   * that is certain to be met and never fails two calls in a row, so a test of it cannot pass or fail by chance.
   */
  every?: number;
  /** Added delay before answering (error or forwarded), ms. */
  latencyMs?: number;
  /** Only when the request's body contains this parameter (e.g. "Ipv4PrefixCount"). */
  whenParam?: string;
}

export interface FaultProxy {
  endpoint: string;
  rules: FaultRule[];
  calls: Record<string, number>;
  injected: Record<string, number>;
  /** Total calls forwarded or answered. */
  total(): number;
  reset(): void;
  close(): Promise<void>;
}

const statusFor = (code: string): number =>
  code === 'RequestLimitExceeded' || code === 'ServiceUnavailable' || code === 'Unavailable' ? 503 : code === 'InternalError' ? 500 : 400;

export function ec2ErrorXml(code: string, message: string, requestId: string): string {
  return `<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error><Code>${code}</Code><Message>${message}</Message></Error></Errors><RequestID>${requestId}</RequestID></Response>`;
}

/** Listens on `host` (loopback by default; a node lab's host leg for its nodes' operator). */
export async function startFaultProxy(target: string, rules: FaultRule[] = [], host = '127.0.0.1'): Promise<FaultProxy> {
  const calls: Record<string, number> = {};
  const injected: Record<string, number> = {};
  const seen = new Map<FaultRule, number>();
  const t = new URL(target);
  let seq = 0;
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      const params = new URLSearchParams(body.toString('utf8'));
      const action = params.get('Action') ?? new URL(req.url ?? '/', 'http://x').searchParams.get('Action') ?? 'unknown';
      calls[action] = (calls[action] ?? 0) + 1;
      const hit = (r: FaultRule): boolean => {
        const k = seen.get(r) ?? 0;
        seen.set(r, k + 1);
        return r.every === undefined || k % r.every === 0;
      };
      let delay = 0;
      let fault: FaultRule | undefined;
      for (const r of proxy.rules) {
        if (r.action !== '*' && r.action !== action) continue;
        if (r.whenParam && ![...params.keys()].some((k) => k.startsWith(r.whenParam!))) continue;
        delay = Math.max(delay, r.latencyMs ?? 0);
        if (!fault && r.code && (r.times === undefined || r.times > 0) && hit(r)) {
          fault = r;
          if (r.times !== undefined) r.times--;
        }
      }
      const respond = (): void => {
        if (fault?.code) {
          injected[fault.code] = (injected[fault.code] ?? 0) + 1;
          const xml = ec2ErrorXml(fault.code, `injected ${fault.code} for ${action}`, `fault-${++seq}`);
          res.writeHead(fault.status ?? statusFor(fault.code), {
            'Content-Type': 'text/xml;charset=UTF-8',
            'Content-Length': Buffer.byteLength(xml),
          });
          res.end(xml);
          return;
        }
        const up = http.request(
          { host: t.hostname, port: t.port, method: req.method, path: req.url, headers: { ...req.headers, host: t.host }, agent: false },
          (ur) => {
            res.writeHead(ur.statusCode ?? 502, ur.headers);
            ur.pipe(res);
          },
        );
        up.on('error', (e) => {
          res.writeHead(502);
          res.end(String(e));
        });
        up.end(body);
      };
      if (delay > 0) setTimeout(respond, delay);
      else respond();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, host, resolve));
  const { port } = server.address() as AddressInfo;
  const proxy: FaultProxy = {
    endpoint: `http://${host}:${port}`,
    rules,
    calls,
    injected,
    total: () => Object.values(calls).reduce((a, b) => a + b, 0),
    reset() {
      for (const k of Object.keys(calls)) delete calls[k];
      for (const k of Object.keys(injected)) delete injected[k];
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
  return proxy;
}
