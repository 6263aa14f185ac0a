/**
 * The plugin's side of the agent protocol: one JSON line out, one JSON line back, over a UNIX socket.
 * Kept apart from agent.ts so the plugin's bundle holds no Kubernetes client.
 */
import type * as Net from 'node:net';
import type { Lease, UsedIp } from './pool';

export const DEFAULT_SOCKET = '/run/cilium-eni-ipam/agent.sock';

/**
 * `check`: the lease `owner` holds (none = not held). `gc`: frees every allocation whose owner is not in `keep`
 * (owners `<containerID>/<ifname>` of the valid attachments) and answers them in `released`. `leases` (read-only,
 * no owner needed): every IP handed out, with its owner and ENI, in `leases` (doctor node reads it).
 */
export interface AgentRequest {
  op: 'add' | 'del' | 'status' | 'check' | 'gc' | 'leases';
  owner: string;
  keep?: string[];
}
export type AgentReply =
  | { ok: true; lease?: Lease; released?: string[]; leases?: UsedIp[]; pool?: number; used?: number; free?: number; operatorError?: string }
  | { ok: false; code: number; msg: string };

/** The client side (the plugin): one request, one reply, with a timeout. */
export function agentRequest(socketPath: string, req: AgentRequest, timeoutMs = 10_000): Promise<AgentReply> {
  // Required here, not at the top: a VERSION call of the plugin should not load node:net and its streams.
  const net = require('node:net') as typeof Net;
  return new Promise((resolve, reject) => {
    const sock = net.createConnection(socketPath);
    let buf = '';
    const t = setTimeout(() => {
      sock.destroy();
      reject(new Error(`agent ${socketPath}: no answer in ${timeoutMs} ms`));
    }, timeoutMs);
    sock.setEncoding('utf8');
    sock.on('connect', () => sock.write(`${JSON.stringify(req)}\n`));
    sock.on('data', (d: string) => {
      buf += d;
    });
    sock.on('end', () => {
      clearTimeout(t);
      try {
        resolve(JSON.parse(buf) as AgentReply);
      } catch (e) {
        reject(new Error(`agent ${socketPath}: bad reply ${JSON.stringify(buf.slice(0, 200))}`, { cause: e }));
      }
    });
    sock.on('error', (e) => {
      clearTimeout(t);
      reject(e);
    });
  });
}
