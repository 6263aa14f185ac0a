/**
 * The daemons' side of gRPC (https://github.com/grpc/grpc/blob/master/doc/PROTOCOL-HTTP2.md) on
 * node:http2 alone, listening on a UNIX socket: `/<service>/<method>` routed to an async handler that takes
 * the request message and returns the response message as Buffers (each family's hand-written codec does
 * the protobuf). Per call: the request headers checked (POST, content-type application/grpc else HTTP 415),
 * `grpc-timeout` armed, the one Length-Prefixed-Message read (Compressed-Flag 0; 1 is INTERNAL without a
 * grpc-encoding and UNIMPLEMENTED with one, as compression.md says, since we accept none), the handler
 * run, then `:status 200`, `content-type: application/grpc`, the framed response and trailers
 * `grpc-status: 0`. Every failure is a Trailers-Only response: `grpc-status`, `grpc-message`
 * (percent-encoded UTF-8) and, when given, `grpc-status-details-bin` (unpadded base64). A handler that
 * outlives the deadline answers DEADLINE_EXCEEDED; a handler's GrpcStatusError gives its code, any other
 * throw UNKNOWN. A server-streaming method (the kubelet's ListAndWatch) gets a writer instead of returning a
 * message: Response-Headers go with its first message, then one Length-Prefixed-Message per write, and the
 * Trailers when the handler settles (Trailers-Only if it wrote nothing); close() aborts its `closing` signal
 * so that it returns and the stream ends OK. @grpc/grpc-js weighs ~5 MiB more than node:http2 once loaded
 * (docs/build.md).
 */
import * as fs from 'node:fs';
import * as http2 from 'node:http2';
import {
  DEFAULT_MAX_RECEIVE,
  GrpcStatusError,
  MAX_TIMER_MS,
  closeEarly,
  errorMessage,
  frame,
  parseTimeout,
  plainHttp,
  readMessage,
  statusOf,
  trailersOf,
  trailersOnly,
  type Status,
} from './server-wire';
import { GrpcStatus } from './status';

export { GrpcStatusError, parseTimeout, percentEncode } from './server-wire';
export { GrpcStatus } from './status';

export interface CallContext {
  service: string;
  method: string;
  /** The request headers (custom metadata among them; `-bin` values still base64). */
  headers: http2.IncomingHttpHeaders;
  /** When the client's `grpc-timeout` runs out (Date.now() clock); undefined without one. */
  deadline?: number;
  /** Aborted when the call is over without the handler's answer: deadline, client cancel, forced close. */
  signal: AbortSignal;
}

export type UnaryHandler = (request: Buffer, call: CallContext) => Promise<Buffer>;

/** The writing side of a server-streaming call. */
export interface ServerStreamWriter {
  /** Sends one response message (the Response-Headers go with the first); false once the call is over. */
  write(message: Buffer): boolean;
  /** Aborted when the server is closing: the handler should return (the call then ends OK). */
  readonly closing: AbortSignal;
}

/** A server-streaming method: resolves when the stream should end with OK trailers; a throw ends it with the error's status. */
export type ServerStreamingHandler = (request: Buffer, call: CallContext, stream: ServerStreamWriter) => Promise<void>;

type Route = { service: string; method: string } & ({ unary: UnaryHandler } | { streaming: ServerStreamingHandler });

/** Metrics of the calls that reach their handler (unknown methods and refused requests do not), as go-grpc-prometheus counts. */
export interface ServerMetrics {
  /** The call reached its handler. */
  started?(service: string, method: string): void;
  /** The call ended with `code` (the one sent; CANCELLED if the client went away first), `seconds` after its handler was called. */
  handled?(service: string, method: string, code: number, seconds: number): void;
}

export interface GrpcServerOptions {
  /** Larger request messages are refused with RESOURCE_EXHAUSTED, as gRPC libraries do; default 4 MiB. */
  maxReceiveMessageLength?: number;
  metrics?: ServerMetrics;
}

export class GrpcServer {
  private readonly routes = new Map<string, Route>();
  private readonly server = http2.createServer();
  private readonly sessions = new Set<http2.ServerHttp2Session>();
  private readonly inFlight = new Set<Promise<void>>();
  private readonly maxReceive: number;
  /** Aborted by close(): refuses new calls, and tells streaming handlers to finish. */
  private readonly shutdown = new AbortController();
  private socketPath?: string;

  constructor(private readonly opts: GrpcServerOptions = {}) {
    this.maxReceive = opts.maxReceiveMessageLength ?? DEFAULT_MAX_RECEIVE;
    this.server.on('session', (session) => {
      this.sessions.add(session);
      session.on('close', () => this.sessions.delete(session));
      session.on('error', () => undefined); // a peer's broken connection is its call's failure, never the daemon's
      if (this.shutdown.signal.aborted) session.close();
    });
    this.server.on('stream', (stream, headers) => this.onStream(stream, headers));
  }

  /** Routes `/<service>/<method>` to each unary handler. */
  addService(service: string, handlers: Record<string, UnaryHandler>): this {
    for (const [method, unary] of Object.entries(handlers)) this.routes.set(`/${service}/${method}`, { service, method, unary });
    return this;
  }

  /** Routes `/<service>/<method>` to each server-streaming handler (e.g. the kubelet's ListAndWatch). */
  addServerStreaming(service: string, handlers: Record<string, ServerStreamingHandler>): this {
    for (const [method, streaming] of Object.entries(handlers)) this.routes.set(`/${service}/${method}`, { service, method, streaming });
    return this;
  }

  /** Listens on the UNIX socket `socketPath` (which must not exist) and gives it `mode`. */
  async listen(socketPath: string, mode = 0o600): Promise<void> {
    await new Promise<void>((resolve, reject) => {
      const onError = (err: Error): void => reject(err);
      this.server.once('error', onError);
      this.server.listen(socketPath, () => {
        this.server.off('error', onError);
        resolve();
      });
    });
    this.socketPath = socketPath;
    fs.chmodSync(socketPath, mode);
  }

  /**
   * Stops accepting connections and calls (GOAWAY on every connection), waits up to `timeoutMs` for the
   * calls in flight to answer, then drops whatever connection is left. The socket file goes with the listener.
   */
  async close(timeoutMs = 10_000): Promise<void> {
    this.shutdown.abort();
    const closed = new Promise<void>((resolve) => this.server.close(() => resolve()));
    for (const s of this.sessions) s.close(); // GOAWAY; each connection ends once its streams have
    let timer: NodeJS.Timeout | undefined;
    const drained = Promise.all([...this.inFlight]).then(() => true);
    const expired = new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(false), timeoutMs)));
    await Promise.race([drained, expired]);
    clearTimeout(timer);
    for (const s of this.sessions) s.destroy();
    await closed;
    if (this.socketPath) fs.rmSync(this.socketPath, { force: true });
  }

  private onStream(stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders): void {
    stream.on('error', () => undefined); // reset streams surface through 'close' below
    if (headers[':method'] !== 'POST') return plainHttp(stream, 405);
    const contentType = headers['content-type'];
    if (typeof contentType !== 'string' || !contentType.startsWith('application/grpc')) return plainHttp(stream, 415);
    if (this.shutdown.signal.aborted) return trailersOnly(stream, { code: GrpcStatus.UNAVAILABLE, message: 'server is shutting down' });
    const path = headers[':path'] ?? '';
    const route = this.routes.get(path);
    if (!route) return trailersOnly(stream, { code: GrpcStatus.UNIMPLEMENTED, message: `method ${path} is not implemented` });
    let timeoutMs: number | undefined;
    const rawTimeout = headers['grpc-timeout'];
    if (rawTimeout !== undefined) {
      timeoutMs = parseTimeout(String(rawTimeout));
      if (timeoutMs === undefined)
        return trailersOnly(stream, { code: GrpcStatus.INTERNAL, message: `malformed grpc-timeout: ${String(rawTimeout)}` });
    }
    const call = new Call(stream, route.service, route.method, this.opts.metrics);
    // in flight until both the handler has settled and the stream has closed (the trailers gone out)
    const closed = new Promise<void>((resolve) => stream.once('close', resolve));
    const run = call.run(headers, timeoutMs, this.maxReceive, route, this.shutdown.signal).catch(() => undefined);
    const done = Promise.all([run, closed]).then(() => undefined);
    this.inFlight.add(done);
    void done.finally(() => this.inFlight.delete(done));
  }
}

/** One routed call, from its request headers to its status. */
class Call {
  /** When the handler was called: calls refused before it (bad message, gone client) are no metrics' business. */
  private t0?: bigint;
  private readonly abort = new AbortController();
  private answered = false;
  private timer?: NodeJS.Timeout;

  constructor(
    private readonly stream: http2.ServerHttp2Stream,
    private readonly service: string,
    private readonly method: string,
    private readonly metrics?: ServerMetrics,
  ) {}

  async run(
    headers: http2.IncomingHttpHeaders,
    timeoutMs: number | undefined,
    maxReceive: number,
    route: Route,
    closing: AbortSignal,
  ): Promise<void> {
    const deadline = timeoutMs === undefined ? undefined : Date.now() + timeoutMs;
    if (timeoutMs !== undefined && timeoutMs <= MAX_TIMER_MS)
      this.timer = setTimeout(() => this.fail({ code: GrpcStatus.DEADLINE_EXCEEDED, message: 'Deadline exceeded' }), timeoutMs);
    this.stream.on('close', () => {
      if (!this.answered) this.end(GrpcStatus.CANCELLED);
    });
    let request: Buffer;
    try {
      request = await readMessage(this.stream, String(headers['grpc-encoding'] ?? 'identity'), maxReceive);
    } catch (err) {
      return this.fail(err instanceof GrpcStatusError ? statusOf(err) : { code: GrpcStatus.INTERNAL, message: (err as Error).message });
    }
    if (this.answered) return;
    this.t0 = process.hrtime.bigint();
    this.metrics?.started?.(this.service, this.method);
    const ctx: CallContext = { service: this.service, method: this.method, headers, deadline, signal: this.abort.signal };
    let response: Buffer;
    try {
      if ('streaming' in route) {
        await route.streaming(request, ctx, this.writer(closing));
        return this.fail({ code: GrpcStatus.OK, message: '' });
      }
      response = await route.unary(request, ctx);
    } catch (err) {
      return this.fail(err instanceof GrpcStatusError ? statusOf(err) : { code: GrpcStatus.UNKNOWN, message: errorMessage(err) });
    }
    if (this.answered) return;
    const stream = this.stream;
    if (stream.destroyed) return this.end(GrpcStatus.CANCELLED);
    this.end(GrpcStatus.OK);
    stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
    stream.once('wantTrailers', () => stream.sendTrailers({ 'grpc-status': '0' }));
    stream.end(frame(response));
    closeEarly(stream);
  }

  /** A streaming call's messages: Response-Headers with the first, one Length-Prefixed-Message each. */
  private writer(closing: AbortSignal): ServerStreamWriter {
    return {
      closing,
      write: (message) => {
        const stream = this.stream;
        if (this.answered || stream.destroyed) return false;
        if (!stream.headersSent) stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
        stream.write(frame(message));
        return true;
      },
    };
  }

  /**
   * Ends the call with `status` (once): Trailers-Only when nothing was sent yet, else (a stream whose
   * Response-Headers went out with its first message) the Trailers after the messages.
   */
  private fail(status: Status): void {
    if (this.answered) return;
    this.end(status.code);
    const stream = this.stream;
    if (!stream.headersSent || stream.destroyed) return trailersOnly(stream, status);
    stream.once('wantTrailers', () => stream.sendTrailers(trailersOf(status)));
    stream.end();
    closeEarly(stream);
  }

  /** Marks the call over (once): timer off, handler told, metrics given the code. */
  private end(code: number): void {
    if (this.answered) return;
    this.answered = true;
    clearTimeout(this.timer);
    if (code !== GrpcStatus.OK) this.abort.abort();
    if (this.t0 !== undefined) this.metrics?.handled?.(this.service, this.method, code, Number(process.hrtime.bigint() - this.t0) / 1e9);
  }
}
