/**
 * The plugin's side of the agent protocol: one JSON line out, one JSON line back, over a UNIX socket.
 * Kept apart from agent.ts so the plugin's bundle holds no Kubernetes client.
 */
import type * as Net from 'node:net';
import { BlockingUnixStream, UnixStreamError, blockingSocketsAllowed } from '@cnikit/netlib/unix';
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

/**
 * The client side (the plugin): one request, one reply, with a timeout. A plugin binary asks on a blocking
 * socket (node:net would cost the call more than the rest of it: netlib's unix/index.ts); a daemon or an
 * in-process test on node:net.
 */
export async function agentRequest(socketPath: string, req: AgentRequest, timeoutMs = 10_000): Promise<AgentReply> {
  if (blockingSocketsAllowed()) return agentRequestBlocking(socketPath, req, timeoutMs);
  return agentRequestEvented(socketPath, req, timeoutMs);
}

function agentRequestBlocking(socketPath: string, req: AgentRequest, timeoutMs: number): AgentReply {
  let stream: BlockingUnixStream | undefined;
  const chunks: Buffer[] = [];
  try {
    stream = BlockingUnixStream.connect(socketPath, timeoutMs);
    stream.write(Buffer.from(`${JSON.stringify(req)}\n`));
    for (let chunk = stream.read(); chunk.length > 0; chunk = stream.read()) chunks.push(chunk);
  } catch (e) {
    if (e instanceof UnixStreamError && e.failure === 'deadline') throw noAnswer(socketPath, timeoutMs);
    throw e;
  } finally {
    stream?.close();
  }
  return parseReply(socketPath, Buffer.concat(chunks).toString('utf8'));
}

const noAnswer = (socketPath: string, timeoutMs: number): Error => new Error(`agent ${socketPath}: no answer in ${timeoutMs} ms`);

function parseReply(socketPath: string, text: string): AgentReply {
  try {
    return JSON.parse(text) as AgentReply;
  } catch (e) {
    throw new Error(`agent ${socketPath}: bad reply ${JSON.stringify(text.slice(0, 200))}`, { cause: e });
  }
}

function agentRequestEvented(socketPath: string, req: AgentRequest, timeoutMs: number): Promise<AgentReply> {
  // Required here, not at the top: a VERSION call of the plugin should not load node:net and its streams.
  const net = require('node:net') as typeof Net;
  return new Promise((resolve, reject) => {
    const sock = net.createConnection(socketPath);
    let buf = '';
    const t = setTimeout(() => {
      sock.destroy();
      reject(noAnswer(socketPath, timeoutMs));
    }, timeoutMs);
    sock.setEncoding('utf8');
    sock.on('connect', () => sock.write(`${JSON.stringify(req)}\n`));
    sock.on('data', (d: string) => {
      buf += d;
    });
    sock.on('end', () => {
      clearTimeout(t);
      try {
        resolve(parseReply(socketPath, buf));
      } catch (e) {
        reject(e);
      }
    });
    sock.on('error', (e) => {
      clearTimeout(t);
      reject(e);
    });
  });
}
