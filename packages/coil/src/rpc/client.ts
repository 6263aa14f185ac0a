/**
 * A minimal gRPC client for the thin `coil` CNI binary: unary calls over a hand-framed HTTP/2 connection
 * (h2.ts) on a UNIX socket, no compression, messages from codec.ts. Loading @grpc/grpc-js (or even
 * node:http2) costs more start-up than a whole ADD round trip should; see docs/coil.md for the figures.
 */
import { H2Error, h2Post } from './h2';
import { cniErrorFromStatus, frame, SERVICE, type CNIErrorMsg } from './codec';

export class RpcError extends Error {
  constructor(
    readonly grpcCode: number,
    message: string,
    readonly cniError?: CNIErrorMsg,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = 'RpcError';
  }
}

/** The socket could not be reached (coild not running): the caller decides what that means. */
export class UnavailableError extends RpcError {
  constructor(socketPath: string, cause: unknown) {
    super(14, `coild not reachable on ${socketPath}: ${(cause as Error).message}`, undefined, { cause });
    this.name = 'UnavailableError';
  }
}

export async function unaryCall(socketPath: string, method: string, request: Buffer, timeoutMs: number): Promise<Buffer> {
  let res;
  try {
    res = await h2Post(
      socketPath,
      `/${SERVICE}/${method}`,
      [
        ['content-type', 'application/grpc'],
        ['te', 'trailers'],
        ['grpc-timeout', `${timeoutMs}m`],
      ],
      frame(request),
      timeoutMs,
    );
  } catch (err) {
    if (err instanceof H2Error && err.connect) throw new UnavailableError(socketPath, err);
    throw new RpcError(14, `${method}: ${(err as Error).message}`, undefined, { cause: err });
  }
  const h = res.headers;
  const status = Number(h['grpc-status'] ?? 2);
  if (status !== 0) {
    let message = h['grpc-message'] ?? `gRPC status ${status}`;
    try {
      message = decodeURIComponent(message);
    } catch {
      // not percent-encoded
    }
    const details = h['grpc-status-details-bin'];
    const cniError = details ? cniErrorFromStatus(Buffer.from(details, 'base64')) : undefined;
    throw new RpcError(Number.isNaN(status) ? 2 : status, message, cniError);
  }
  const body = res.body;
  if (body.length < 5) throw new RpcError(13, `${method}: empty response`);
  return body.subarray(5, 5 + body.readUInt32BE(1));
}
