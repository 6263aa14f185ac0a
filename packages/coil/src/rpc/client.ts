/**
 * The thin `coil` CNI binary's calls to coild: @cnikit/unary-grpc's unary call (no gRPC library to load;
 * docs/build.md has the figures) on pkg.cnirpc.CNI, messages from codec.ts, and coild's CNIError read back
 * from the google.rpc.Status in `grpc-status-details-bin`.
 */
import { GrpcConnectError, GrpcError, unaryCall as grpcUnaryCall } from '@cnikit/unary-grpc';
import { cniErrorFromStatus, SERVICE, type CNIErrorMsg } from './codec';

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
  try {
    return await grpcUnaryCall(socketPath, `/${SERVICE}/${method}`, request, timeoutMs);
  } catch (err) {
    if (err instanceof GrpcConnectError) throw new UnavailableError(socketPath, err.cause);
    if (!(err instanceof GrpcError)) throw err;
    if (err.local) throw new RpcError(err.code, `${method}: ${err.message}`, undefined, { cause: err });
    const details = err.metadata['grpc-status-details-bin'];
    throw new RpcError(err.code, err.message, details ? cniErrorFromStatus(Buffer.from(details, 'base64')) : undefined);
  }
}
