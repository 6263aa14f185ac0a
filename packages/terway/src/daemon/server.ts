/**
 * terwayd's gRPC server: rpc.TerwayBackend on a UNIX socket (mode 0600).
 * "Try again later" failures (pool exhausted, cloud down, timeouts) answer
 * UNAVAILABLE, bad requests INVALID_ARGUMENT, anything else INTERNAL; the
 * CNI binary turns UNAVAILABLE / DEADLINE_EXCEEDED into CNI code 11.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { terwayService } from '../rpc/service';
import { isTransient, type TerwayDaemon } from './daemon';

function statusOf(e: unknown): grpc.status {
  if (isTransient(e)) return grpc.status.UNAVAILABLE;
  if (e instanceof TypeError) return grpc.status.INVALID_ARGUMENT;
  return grpc.status.INTERNAL;
}

export class TerwayServer {
  private readonly server = new grpc.Server();

  /** `onCall(method, ms, error)` after every RPC (error: the gRPC status name, '' on success): metrics. */
  constructor(
    daemon: TerwayDaemon,
    private readonly socketPath: string,
    onCall?: (method: string, ms: number, error: string) => void,
  ) {
    const wrap =
      <Req, Rep>(method: string, fn: (r: Req) => Promise<Rep>): grpc.handleUnaryCall<Req, Rep> =>
      (call, cb) => {
        const t0 = performance.now();
        fn(call.request).then(
          (rep) => {
            onCall?.(method, performance.now() - t0, '');
            cb(null, rep);
          },
          (e: unknown) => {
            const code = statusOf(e);
            onCall?.(method, performance.now() - t0, grpc.status[code] ?? String(code));
            cb({ code, details: e instanceof Error ? e.message : String(e) });
          },
        );
      };
    this.server.addService(terwayService(), {
      AllocIP: wrap('AllocIP', (r: Parameters<TerwayDaemon['allocIP']>[0]) => daemon.allocIP(r)),
      ReleaseIP: wrap('ReleaseIP', (r: Parameters<TerwayDaemon['releaseIP']>[0]) => daemon.releaseIP(r)),
      GetIPInfo: wrap('GetIPInfo', (r: Parameters<TerwayDaemon['getIPInfo']>[0]) => daemon.getIPInfo(r)),
      RecordEvent: wrap('RecordEvent', (r: Parameters<TerwayDaemon['recordEvent']>[0]) => daemon.recordEvent(r)),
      ListLeases: wrap('ListLeases', () => daemon.listLeases()),
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
