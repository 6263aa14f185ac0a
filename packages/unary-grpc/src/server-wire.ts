/**
 * The wire of gRPC's server side over node:http2 (https://github.com/grpc/grpc/blob/master/doc/PROTOCOL-HTTP2.md),
 * kept apart from GrpcServer (server.ts) so the class reads as the call's flow: status codes and errors, reading the
 * one request message, Trailers-Only answers, Length-Prefixed-Messages, grpc-message and grpc-timeout.
 */
import * as http2 from 'node:http2';
import { GrpcStatus } from './status';

/** Thrown by a handler: the call fails with `code`, `message` and, if given, `details` (a google.rpc.Status). */
export class GrpcStatusError extends Error {
  constructor(
    readonly code: number,
    message: string,
    readonly details?: Buffer,
    /** More trailers beside the status (ASCII values). */
    readonly trailers?: Record<string, string>,
  ) {
    super(message);
    this.name = 'GrpcStatusError';
  }
}

export const DEFAULT_MAX_RECEIVE = 4 * 1024 * 1024;

export const TIMEOUT_UNIT_MS: Record<string, number> = { H: 3_600_000, M: 60_000, S: 1000, m: 1, u: 1e-3, n: 1e-6 };

/** setTimeout's largest delay; a longer grpc-timeout is as good as none. */
export const MAX_TIMER_MS = 2 ** 31 - 1;

export interface Status {
  code: number;
  message: string;
  details?: Buffer;
  extra?: http2.OutgoingHttpHeaders;
}

/**
 * The request body: exactly one Length-Prefixed-Message up to the client's END_STREAM. DATA frame
 * boundaries mean nothing; a message over `maxReceive` is refused as soon as its length is known.
 */
export function readMessage(stream: http2.ServerHttp2Stream, encoding: string, maxReceive: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let checked = false;
    const check = (head: Buffer): GrpcStatusError | undefined => {
      const flag = head[0]!;
      if (flag === 1 && (encoding === 'identity' || encoding === ''))
        return new GrpcStatusError(GrpcStatus.INTERNAL, 'Compressed-Flag set on a message without a grpc-encoding');
      if (flag === 1)
        return new GrpcStatusError(GrpcStatus.UNIMPLEMENTED, `grpc-encoding ${encoding} is not supported`, undefined, {
          'grpc-accept-encoding': 'identity',
        });
      if (flag !== 0) return new GrpcStatusError(GrpcStatus.INTERNAL, `Compressed-Flag ${flag} is neither 0 nor 1`);
      const length = head.readUInt32BE(1);
      if (length > maxReceive)
        return new GrpcStatusError(GrpcStatus.RESOURCE_EXHAUSTED, `request message of ${length} bytes is over the limit of ${maxReceive}`);
      return undefined;
    };
    const onData = (chunk: Buffer): void => {
      chunks.push(chunk);
      size += chunk.length;
      if (checked || size < 5) return;
      checked = true;
      const err = check(chunks.length === 1 ? chunk : Buffer.concat(chunks));
      if (err) stop(err);
    };
    const stop = (err: Error): void => {
      stream.off('data', onData);
      stream.off('end', onEnd);
      stream.resume();
      reject(err);
    };
    const onEnd = (): void => {
      const body = Buffer.concat(chunks, size);
      if (body.length < 5) return reject(new GrpcStatusError(GrpcStatus.INTERNAL, 'no request message'));
      const length = body.readUInt32BE(1);
      if (body.length < 5 + length)
        return reject(new GrpcStatusError(GrpcStatus.INTERNAL, `request message cut short (${body.length - 5} of ${length} bytes)`));
      if (body.length > 5 + length)
        return reject(new GrpcStatusError(GrpcStatus.INTERNAL, 'more than one request message in a unary call'));
      resolve(body.subarray(5));
    };
    const onClose = (): void => reject(new GrpcStatusError(GrpcStatus.CANCELLED, 'stream closed before the request ended'));
    stream.on('data', onData);
    stream.on('end', onEnd);
    stream.once('close', onClose);
  });
}

export function statusOf(err: GrpcStatusError): Status {
  return { code: err.code, message: err.message, details: err.details, extra: err.trailers };
}

export function errorMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** A response that is not gRPC's: the HTTP status alone (the spec's 415 for a content-type not application/grpc). */
export function plainHttp(stream: http2.ServerHttp2Stream, status: number): void {
  if (stream.destroyed || stream.headersSent) return;
  stream.respond({ ':status': status }, { endStream: true });
  closeEarly(stream);
}

export function trailersOf(status: Status): http2.OutgoingHttpHeaders {
  const t: http2.OutgoingHttpHeaders = { 'grpc-status': String(status.code) };
  if (status.message) t['grpc-message'] = percentEncode(status.message);
  if (status.details) t['grpc-status-details-bin'] = status.details.toString('base64').replace(/=+$/, '');
  return Object.assign(t, status.extra);
}

/** Trailers-Only: HTTP-Status, Content-Type and the Trailers in one HEADERS block ending the stream. */
export function trailersOnly(stream: http2.ServerHttp2Stream, status: Status): void {
  if (stream.destroyed || stream.headersSent) return;
  stream.respond({ ':status': 200, 'content-type': 'application/grpc', ...trailersOf(status) }, { endStream: true });
  closeEarly(stream);
}

/**
 * Early Server Closure: when we answer before the client's END_STREAM, RST_STREAM(NO_ERROR) follows
 * our last HEADERS frame so the stream can be freed (node:http2 sends it once our side has finished).
 */
export function closeEarly(stream: http2.ServerHttp2Stream): void {
  if (!stream.readableEnded) stream.close(http2.constants.NGHTTP2_NO_ERROR);
}

/** gRPC's Length-Prefixed-Message: Compressed-Flag 0, the length (4 bytes, big-endian), the message. */
export function frame(msg: Buffer): Buffer {
  const head = Buffer.alloc(5);
  head.writeUInt32BE(msg.length, 1);
  return Buffer.concat([head, msg]);
}

/** Status-Message: the UTF-8 bytes, those outside %x20-%x24 / %x26-%x7E as "%" and two upper-case hex digits. */
export function percentEncode(message: string): string {
  let out = '';
  for (const b of Buffer.from(message, 'utf8')) {
    out += b >= 0x20 && b <= 0x7e && b !== 0x25 ? String.fromCharCode(b) : `%${b.toString(16).toUpperCase().padStart(2, '0')}`;
  }
  return out;
}

/** Timeout: TimeoutValue (1 to 8 ASCII digits) then its unit (H M S m u n), in milliseconds; undefined if malformed. */
export function parseTimeout(raw: string): number | undefined {
  const m = /^(\d{1,8})([HMSmun])$/.exec(raw);
  if (!m) return undefined;
  return Number(m[1]) * TIMEOUT_UNIT_MS[m[2]!]!;
}
