/**
 * A stand-in for the node agent's UNIX socket: the agent's line protocol (agent-client.ts) answered
 * from a PoolAllocator, so the IPAM plugin can be tested without the API server and EC2. Errors of
 * the allocator answer as code 11 (try again later), as the agent does.
 */
import * as net from 'node:net';
import type { AgentReply, AgentRequest, PoolAllocator } from '@cnikit/cilium-eni-ipam';

export function stubAgent(socket: string, pool: PoolAllocator): Promise<net.Server> {
  const srv = net.createServer((s) => {
    let buf = '';
    s.setEncoding('utf8');
    s.on('data', (c: string) => {
      buf += c;
      if (!buf.includes('\n')) return;
      const req = JSON.parse(buf) as AgentRequest;
      let reply: AgentReply;
      try {
        reply =
          req.op === 'add'
            ? { ok: true, lease: pool.allocate(req.owner) }
            : req.op === 'del'
              ? { ok: true, released: pool.release(req.owner) }
              : req.op === 'check'
                ? { ok: true, lease: pool.holding(req.owner) }
                : req.op === 'gc'
                  ? { ok: true, released: pool.releaseExcept(new Set(req.keep)) }
                  : { ok: true, pool: pool.poolSize, used: pool.used.size, free: pool.freeIps().length };
      } catch (e) {
        reply = { ok: false, code: 11, msg: (e as Error).message };
      }
      s.end(`${JSON.stringify(reply)}\n`);
    });
  });
  return new Promise((r) => srv.listen(socket, () => r(srv)));
}
