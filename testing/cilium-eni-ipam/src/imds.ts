/**
 * An EC2 instance metadata service (IMDSv2) stand-in for instances that are not on EC2 (a node lab's nodes, a
 * test), as documented: `PUT /latest/api/token` with `X-aws-ec2-metadata-token-ttl-seconds` (1-21600, else 400)
 * answers a session token; `GET /latest/meta-data/<path>` needs a live token in `X-aws-ec2-metadata-token` (else
 * 401) and answers the value as text, 404 for a path the instance does not have. Each caller is answered as its
 * own instance, by its source address: what a VM's link-local metadata service does.
 */
import { randomBytes } from 'node:crypto';
import * as http from 'node:http';
import type { AddressInfo } from 'node:net';

export interface Imds {
  /** http://host:port */
  endpoint: string;
  stop(): Promise<void>;
}

/** The metadata paths of the agent's instance data: instance-id, instance-type, placement, its primary MAC's VPC and subnet. */
export function instanceMetadata(i: {
  instanceId: string;
  instanceType: string;
  availabilityZone: string;
  mac: string;
  vpcId: string;
  subnetId: string;
}): Record<string, string> {
  return {
    'instance-id': i.instanceId,
    'instance-type': i.instanceType,
    'placement/availability-zone': i.availabilityZone,
    mac: i.mac,
    [`network/interfaces/macs/${i.mac}/vpc-id`]: i.vpcId,
    [`network/interfaces/macs/${i.mac}/subnet-id`]: i.subnetId,
  };
}

/** Serves `byCaller` (caller address -> metadata path -> value) on host:port (port 0: any free one). */
export async function startImds(byCaller: Record<string, Record<string, string>>, host = '127.0.0.1', port = 0): Promise<Imds> {
  const tokens = new Map<string, number>(); // token -> expiry (ms)
  const server = http.createServer((req, res) => {
    const answer = (status: number, body = ''): void => {
      res.writeHead(status, { 'content-type': 'text/plain' });
      res.end(body);
    };
    if (req.method === 'PUT' && req.url === '/latest/api/token') {
      const ttl = Number(req.headers['x-aws-ec2-metadata-token-ttl-seconds']);
      if (!Number.isInteger(ttl) || ttl < 1 || ttl > 21600) return answer(400);
      const token = randomBytes(24).toString('base64url');
      tokens.set(token, Date.now() + ttl * 1000);
      return answer(200, token);
    }
    if (req.method !== 'GET' || !req.url?.startsWith('/latest/meta-data/')) return answer(404);
    const expiry = tokens.get(String(req.headers['x-aws-ec2-metadata-token'] ?? ''));
    if (expiry === undefined || expiry < Date.now()) return answer(401);
    const data = byCaller[(req.socket.remoteAddress ?? '').replace(/^::ffff:/, '')];
    const value = data?.[req.url.slice('/latest/meta-data/'.length).replace(/\/$/, '')];
    return value === undefined ? answer(404) : answer(200, value);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, resolve);
  });
  const { port: bound } = server.address() as AddressInfo;
  return {
    endpoint: `http://${host}:${bound}`,
    stop: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
