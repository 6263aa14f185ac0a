/**
 * The terway binary's side of rpc.TerwayBackend: one grpc-js client on the
 * daemon's UNIX socket, a deadline per call (120 s as the anchor), and
 * "try again later" statuses (UNAVAILABLE, DEADLINE_EXCEEDED,
 * RESOURCE_EXHAUSTED, daemon not listening) turned into CNI code 11.
 */
import * as grpc from '@grpc/grpc-js';
import { CniCode, CniError, TransientError } from '@cnikit/netlib';
import {
  terwayService,
  type AllocIPReply,
  type EventReply,
  type EventRequest,
  type GetInfoReply,
  type PodRef,
  type ReleaseIPReply,
} from '../rpc/proto';

export const CLIENT_TIMEOUT_MS = 120_000;

const TRY_AGAIN = new Set([grpc.status.UNAVAILABLE, grpc.status.DEADLINE_EXCEEDED, grpc.status.RESOURCE_EXHAUSTED]);

export class TerwayClient {
  private readonly client: grpc.Client;

  constructor(
    socketPath: string,
    private readonly timeoutMs = CLIENT_TIMEOUT_MS,
  ) {
    const Ctor = grpc.makeGenericClientConstructor(terwayService(), 'TerwayBackend');
    this.client = new Ctor(`unix://${socketPath}`, grpc.credentials.createInsecure());
  }

  private call<Req, Rep>(method: string, req: Req): Promise<Rep> {
    const fn = (
      this.client as unknown as Record<
        string,
        (r: Req, md: grpc.Metadata, o: grpc.CallOptions, cb: (e: grpc.ServiceError | null, rep: Rep) => void) => void
      >
    )[method]!;
    return new Promise<Rep>((resolve, reject) => {
      fn.call(this.client, req, new grpc.Metadata(), { deadline: Date.now() + this.timeoutMs }, (e, rep) => {
        if (!e) return resolve(rep);
        const msg = `terway: ${method}: ${e.details || e.message}`;
        reject(
          TRY_AGAIN.has(e.code)
            ? new TransientError(msg, `grpc status ${e.code}`, { cause: e })
            : new CniError(CniCode.Internal, msg, `grpc status ${e.code}`, { cause: e }),
        );
      });
    });
  }

  allocIP(r: PodRef): Promise<AllocIPReply> {
    return this.call('AllocIP', r);
  }

  releaseIP(r: PodRef & { Reason: string }): Promise<ReleaseIPReply> {
    return this.call('ReleaseIP', r);
  }

  getIPInfo(r: PodRef): Promise<GetInfoReply> {
    return this.call('GetIPInfo', r);
  }

  recordEvent(e: EventRequest): Promise<EventReply> {
    return this.call('RecordEvent', e);
  }

  close(): void {
    this.client.close();
  }
}
