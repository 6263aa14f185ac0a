/**
 * A gRPC unary call (https://github.com/grpc/grpc/blob/master/doc/PROTOCOL-HTTP2.md) over h2.ts: one
 * length-prefixed message out, one back, the status from `grpc-status`/`grpc-message` in the trailers
 * (or in the headers of a trailers-only response). No compression. The deadline covers the connection,
 * the request and the answer, as a gRPC deadline does, and goes to the server as `grpc-timeout`.
 */
import { H2Error, h2Post, type H2Response } from './h2';

import { GrpcStatus } from './status';

export { GrpcStatus } from './status';

/**
 * A call that did not answer OK. `metadata`: the response's headers and trailers when the server answered
 * (e.g. `grpc-status-details-bin`); `local`: the status is ours (no connection, deadline, bad response).
 */
export class GrpcError extends Error {
  constructor(
    readonly code: number,
    message: string,
    readonly local: boolean,
    readonly metadata: Record<string, string> = {},
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = 'GrpcError';
  }
}

/** Nobody accepted the connection on the socket (the daemon is not running): UNAVAILABLE before any request went out. */
export class GrpcConnectError extends GrpcError {
  constructor(socketPath: string, cause: Error) {
    super(GrpcStatus.UNAVAILABLE, `no connection to ${socketPath}: ${cause.message}`, true, {}, { cause });
    this.name = 'GrpcConnectError';
  }
}

/**
 * Calls `path` (`/<package>.<Service>/<Method>`) with the encoded `request`; resolves with the encoded reply.
 * `metadata`: request metadata beside gRPC's own (containerd's API wants `containerd-namespace`).
 */
export async function unaryCall(
  socketPath: string,
  path: string,
  request: Buffer,
  timeoutMs: number,
  metadata: [string, string][] = [],
): Promise<Buffer> {
  const headers: [string, string][] = [
    ['content-type', 'application/grpc'],
    ['te', 'trailers'],
    ['grpc-timeout', `${timeoutMs}m`],
    ...metadata,
  ];
  let res: H2Response;
  try {
    res = await h2Post(socketPath, path, headers, frameMessage(request), timeoutMs);
  } catch (err) {
    throw localError(socketPath, err);
  }
  const status = statusOf(res.headers);
  if (status) throw status;
  return unframeMessage(res.body);
}

function localError(socketPath: string, err: unknown): GrpcError {
  if (!(err instanceof H2Error)) return new GrpcError(GrpcStatus.INTERNAL, (err as Error).message, true, {}, { cause: err });
  if (err.failure === 'connect') return new GrpcConnectError(socketPath, err);
  const code = err.failure === 'deadline' ? GrpcStatus.DEADLINE_EXCEEDED : GrpcStatus.UNAVAILABLE;
  return new GrpcError(code, err.message, true, {}, { cause: err });
}

/** The server's status unless it is OK; a response without `grpc-status` is UNKNOWN, as the gRPC spec says. */
function statusOf(metadata: Record<string, string>): GrpcError | undefined {
  const raw = metadata['grpc-status'];
  const code = raw === undefined || !/^\d+$/.test(raw) ? GrpcStatus.UNKNOWN : Number(raw);
  if (code === GrpcStatus.OK) return undefined;
  return new GrpcError(code, statusMessage(metadata['grpc-message']) ?? `gRPC status ${code}`, false, metadata);
}

/** grpc-message is percent-encoded UTF-8; taken as it is when it does not decode. */
function statusMessage(raw: string | undefined): string | undefined {
  if (!raw) return undefined;
  try {
    return decodeURIComponent(raw);
  } catch {
    return raw;
  }
}

/** gRPC's Length-Prefixed-Message: a compressed flag (0), the length (4 bytes), the message. */
export function frameMessage(msg: Buffer): Buffer {
  const head = Buffer.alloc(5);
  head.writeUInt32BE(msg.length, 1);
  return Buffer.concat([head, msg]);
}

function unframeMessage(body: Buffer): Buffer {
  if (body.length < 5) throw new GrpcError(GrpcStatus.INTERNAL, 'no message in the response', true);
  if (body[0] !== 0) throw new GrpcError(GrpcStatus.INTERNAL, 'compressed response (none was asked for)', true);
  const length = body.readUInt32BE(1);
  if (body.length < 5 + length)
    throw new GrpcError(GrpcStatus.INTERNAL, `response message cut short (${body.length - 5} of ${length} bytes)`, true);
  return body.subarray(5, 5 + length);
}
