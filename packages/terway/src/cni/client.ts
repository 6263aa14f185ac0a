/**
 * The terway binary's side of rpc.TerwayBackend: @cnikit/unary-grpc's unary call on the daemon's UNIX
 * socket (no gRPC library to load; docs/build.md has the figures), messages from rpc/codec.ts, a deadline
 * per call (120 s as Terway), and "try again later" statuses (UNAVAILABLE, DEADLINE_EXCEEDED,
 * RESOURCE_EXHAUSTED, daemon not listening) turned into CNI code 11. Each call has its own connection.
 */
import { CniCode, CniError, TransientError } from '@cnikit/netlib';
import { GrpcError, GrpcStatus, unaryCall } from '@cnikit/unary-grpc';
import {
  decodeAllocIPReply,
  decodeEventReply,
  decodeGetInfoReply,
  decodeListLeasesReply,
  decodeReleaseIPReply,
  encodeEventRequest,
  encodePodRef,
} from '../rpc/codec';
import type { AllocIPReply, EventReply, EventRequest, GetInfoReply, ListLeasesReply, PodRef, ReleaseIPReply } from '../rpc/proto';

export const CLIENT_TIMEOUT_MS = 120_000;

const TRY_AGAIN = new Set<number>([GrpcStatus.UNAVAILABLE, GrpcStatus.DEADLINE_EXCEEDED, GrpcStatus.RESOURCE_EXHAUSTED]);

export class TerwayClient {
  constructor(
    private readonly socketPath: string,
    private readonly timeoutMs = CLIENT_TIMEOUT_MS,
  ) {}

  private async call<Rep>(method: string, request: Buffer, decode: (b: Buffer) => Rep): Promise<Rep> {
    let reply: Buffer;
    try {
      reply = await unaryCall(this.socketPath, `/rpc.TerwayBackend/${method}`, request, this.timeoutMs);
    } catch (e) {
      if (!(e instanceof GrpcError)) throw e;
      const msg = `terway: ${method}: ${e.message}`;
      throw TRY_AGAIN.has(e.code)
        ? new TransientError(msg, `grpc status ${e.code}`, { cause: e })
        : new CniError(CniCode.Internal, msg, `grpc status ${e.code}`, { cause: e });
    }
    try {
      return decode(reply);
    } catch (e) {
      // grpc-js answered INTERNAL for a reply it could not parse: the same here.
      throw new CniError(CniCode.Internal, `terway: ${method}: ${(e as Error).message}`, `grpc status ${GrpcStatus.INTERNAL}`, {
        cause: e,
      });
    }
  }

  allocIP(r: PodRef): Promise<AllocIPReply> {
    return this.call('AllocIP', encodePodRef(r), decodeAllocIPReply);
  }

  releaseIP(r: PodRef & { Reason: string }): Promise<ReleaseIPReply> {
    return this.call('ReleaseIP', encodePodRef(r), decodeReleaseIPReply);
  }

  getIPInfo(r: PodRef): Promise<GetInfoReply> {
    return this.call('GetIPInfo', encodePodRef(r), decodeGetInfoReply);
  }

  recordEvent(e: EventRequest): Promise<EventReply> {
    return this.call('RecordEvent', encodeEventRequest(e), decodeEventReply);
  }

  /** ListLeasesRequest has no fields: its encoding is empty. */
  listLeases(): Promise<ListLeasesReply> {
    return this.call('ListLeases', Buffer.alloc(0), decodeListLeasesReply);
  }
}
