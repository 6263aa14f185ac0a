/**
 * terwayd's gRPC server: rpc.TerwayBackend on a UNIX socket (mode 0600), on @cnikit/unary-grpc/server
 * with the hand-written codec (rpc/codec.ts): no gRPC library loaded. "Try again later" failures (pool
 * exhausted, cloud down, timeouts) answer UNAVAILABLE, bad requests INVALID_ARGUMENT, anything else
 * INTERNAL; the CNI binary turns UNAVAILABLE / DEADLINE_EXCEEDED into CNI code 11.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { GrpcStatusError, GrpcServer, type UnaryHandler } from '@cnikit/unary-grpc/server';
import * as codec from '../rpc/codec';
import { isTransient, type TerwayDaemon } from './daemon';

/** The codes terwayd answers with, and their names as the rpc latency metric's `error` label has them. */
const Status = { INVALID_ARGUMENT: 3, INTERNAL: 13, UNAVAILABLE: 14 } as const;
const STATUS_NAMES: Record<number, string> = { 3: 'INVALID_ARGUMENT', 13: 'INTERNAL', 14: 'UNAVAILABLE' };

function statusOf(e: unknown): number {
  if (isTransient(e)) return Status.UNAVAILABLE;
  if (e instanceof TypeError) return Status.INVALID_ARGUMENT;
  return Status.INTERNAL;
}

export const TERWAY_SERVICE = 'rpc.TerwayBackend';

export class TerwayServer {
  private readonly server = new GrpcServer();

  /** `onCall(method, ms, error)` after every RPC (error: the gRPC status name, '' on success): metrics. */
  constructor(
    daemon: TerwayDaemon,
    private readonly socketPath: string,
    onCall?: (method: string, ms: number, error: string) => void,
  ) {
    const wrap =
      <Req, Rep>(method: string, decode: (b: Buffer) => Req, fn: (r: Req) => Promise<Rep>, encode: (r: Rep) => Buffer): UnaryHandler =>
      async (bytes) => {
        let request: Req;
        try {
          request = decode(bytes);
        } catch (e) {
          // a request that does not parse never reaches the handler (as grpc-js: INTERNAL, no metric)
          throw new GrpcStatusError(Status.INTERNAL, `Failed to parse request: ${e instanceof Error ? e.message : String(e)}`);
        }
        const t0 = performance.now();
        let reply: Rep;
        try {
          reply = await fn(request);
        } catch (e) {
          const code = statusOf(e);
          onCall?.(method, performance.now() - t0, STATUS_NAMES[code]!);
          throw new GrpcStatusError(code, e instanceof Error ? e.message : String(e));
        }
        onCall?.(method, performance.now() - t0, '');
        return encode(reply);
      };
    this.server.addService(TERWAY_SERVICE, {
      AllocIP: wrap('AllocIP', codec.decodePodRef, (r) => daemon.allocIP(r), codec.encodeAllocIPReply),
      ReleaseIP: wrap('ReleaseIP', codec.decodeReleaseIPRequest, (r) => daemon.releaseIP(r), codec.encodeReleaseIPReply),
      GetIPInfo: wrap('GetIPInfo', codec.decodePodRef, (r) => daemon.getIPInfo(r), codec.encodeGetInfoReply),
      RecordEvent: wrap('RecordEvent', codec.decodeEventRequest, (r) => daemon.recordEvent(r), codec.encodeEventReply),
      ListLeases: wrap(
        'ListLeases',
        () => undefined,
        () => daemon.listLeases(),
        codec.encodeListLeasesReply,
      ),
    });
  }

  async start(): Promise<void> {
    fs.mkdirSync(path.dirname(this.socketPath), { recursive: true });
    fs.rmSync(this.socketPath, { force: true });
    await this.server.listen(this.socketPath, 0o600);
  }

  async stop(): Promise<void> {
    await this.server.close();
    fs.rmSync(this.socketPath, { force: true });
  }
}
