/** What the unary-grpc tests share. */
import { GrpcError } from '../src';

/** The GrpcError a call failed with; throws when it succeeded or failed otherwise. */
export async function failure(p: Promise<unknown>): Promise<GrpcError> {
  const e = await p.then(
    () => undefined,
    (err: unknown) => err,
  );
  if (!(e instanceof GrpcError)) throw new Error(`expected a GrpcError, got ${String(e)}`);
  return e;
}
