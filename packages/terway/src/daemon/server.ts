/**
 * terwayd's gRPC server: rpc.TerwayBackend on a UNIX socket (mode 0600).
 * "Try again later" failures (pool exhausted, cloud down, timeouts) answer
 * UNAVAILABLE, bad requests INVALID_ARGUMENT, anything else INTERNAL; the
 * CNI binary turns UNAVAILABLE / DEADLINE_EXCEEDED into CNI code 11.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { terwayService } from '../rpc/proto';
import { isTransient, type TerwayDaemon } from './daemon';

function statusOf(e: unknown): grpc.status {
  if (isTransient(e)) return grpc.status.UNAVAILABLE;
  if (e instanceof TypeError) return grpc.status.INVALID_ARGUMENT;
  return grpc.status.INTERNAL;
}

export class TerwayServer {
  private readonly server = new grpc.Server();

  constructor(daemon: TerwayDaemon, private readonly socketPath: string) {
    const wrap =
      <Req, Rep>(fn: (r: Req) => Promise<Rep>): grpc.handleUnaryCall<Req, Rep> =>
      (call, cb) => {
        fn(call.request).then(
          (rep) => cb(null, rep),
          (e: unknown) => cb({ code: statusOf(e), details: e instanceof Error ? e.message : String(e) }),
        );
      };
    this.server.addService(terwayService(), {
      AllocIP: wrap((r: Parameters<TerwayDaemon['allocIP']>[0]) => daemon.allocIP(r)),
      ReleaseIP: wrap((r: Parameters<TerwayDaemon['releaseIP']>[0]) => daemon.releaseIP(r)),
      GetIPInfo: wrap((r: Parameters<TerwayDaemon['getIPInfo']>[0]) => daemon.getIPInfo(r)),
      RecordEvent: wrap((r: Parameters<TerwayDaemon['recordEvent']>[0]) => daemon.recordEvent(r)),
    });
  }

  async start(): Promise<void> {
    fs.mkdirSync(path.dirname(this.socketPath), { recursive: true });
    fs.rmSync(this.socketPath, { force: true });
    await new Promise<void>((resolve, reject) =>
      this.server.bindAsync(`unix://${this.socketPath}`, grpc.ServerCredentials.createInsecure(), (err) => (err ? reject(err) : resolve())),
    );
    fs.chmodSync(this.socketPath, 0o600);
  }

  async stop(): Promise<void> {
    await new Promise<void>((r) => this.server.tryShutdown(() => r()));
    this.server.forceShutdown();
    fs.rmSync(this.socketPath, { force: true });
  }
}
