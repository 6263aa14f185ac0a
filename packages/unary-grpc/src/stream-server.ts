/**
 * A gRPC server on node:http2 with server-streaming methods beside unary ones
 * (https://github.com/grpc/grpc/blob/master/doc/PROTOCOL-HTTP2.md), for the services that need one, such
 * as the kubelet's device-plugin API (ListAndWatch). An addition beside @cnikit/unary-grpc/server, on its
 * public API only: UnaryServer serves the daemons' unary services; this one routes `/<service>/<method>`
 * either to a UnaryHandler (same contract as UnaryServer's) or to a ServerStreamingHandler, which gets the
 * one request message and a writer of response messages.
 *
 * Per call: request headers checked (POST, content-type application/grpc..., else HTTP 405/415),
 * `grpc-timeout` armed, exactly one Length-Prefixed-Message read (Compressed-Flag 0; 1 refused as
 * compression.md says, since we accept no encoding). A streaming call answers Response-Headers
 * (`:status 200`, `content-type: application/grpc`) with its first message, then one Length-Prefixed-Message
 * per write, and ends with Trailers (`grpc-status`, `grpc-message`) when its handler settles: OK when it
 * returns, its GrpcStatusError's code (UNKNOWN for any other throw) when it throws. A failure before any
 * message is a Trailers-Only response. When the client goes away (RST_STREAM, connection lost) or the
 * deadline passes, the call's `signal` aborts; when the server closes, every streaming call's `closing`
 * signal aborts so its handler can end the stream with OK trailers (a plugin stopping).
 */
import * as fs from 'node:fs';
import * as http2 from 'node:http2';
import type { CallContext, UnaryHandler } from './server';
import {
  DEFAULT_MAX_RECEIVE,
  GrpcStatusError,
  MAX_TIMER_MS,
  ServerStatus,
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

/** The writing side of a server-streaming call. */
export interface ServerStreamWriter {
  /** Sends one response message (the Response-Headers go with the first); false once the call is over. */
  write(message: Buffer): boolean;
  /** Aborted when the server is closing: the handler should return (the call then ends OK). */
  readonly closing: AbortSignal;
}

/** Resolves when the stream should end with OK trailers; a throw ends it with the error's status. */
export type ServerStreamingHandler = (request: Buffer, call: CallContext, stream: ServerStreamWriter) => Promise<void>;

export interface ServiceHandlers {
  unary?: Record<string, UnaryHandler>;
  serverStreaming?: Record<string, ServerStreamingHandler>;
}

export interface StreamServerOptions {
  /** Larger request messages are refused with RESOURCE_EXHAUSTED; default 4 MiB. */
  maxReceiveMessageLength?: number;
}

type Route = { service: string; method: string } & (
  { kind: 'unary'; handler: UnaryHandler } | { kind: 'stream'; handler: ServerStreamingHandler }
);

export class StreamServer {
  private readonly routes = new Map<string, Route>();
  private readonly server = http2.createServer();
  private readonly sessions = new Set<http2.ServerHttp2Session>();
  private readonly inFlight = new Set<Promise<void>>();
  private readonly shutdown = new AbortController();
  private readonly maxReceive: number;
  private socketPath?: string;

  constructor(opts: StreamServerOptions = {}) {
    this.maxReceive = opts.maxReceiveMessageLength ?? DEFAULT_MAX_RECEIVE;
    this.server.on('session', (session) => {
      this.sessions.add(session);
      session.on('close', () => this.sessions.delete(session));
      session.on('error', () => undefined);
      if (this.shutdown.signal.aborted) session.close();
    });
    this.server.on('stream', (stream, headers) => this.onStream(stream, headers));
  }

  addService(service: string, handlers: ServiceHandlers): this {
    for (const [method, handler] of Object.entries(handlers.unary ?? {}))
      this.routes.set(`/${service}/${method}`, { service, method, kind: 'unary', handler });
    for (const [method, handler] of Object.entries(handlers.serverStreaming ?? {}))
      this.routes.set(`/${service}/${method}`, { service, method, kind: 'stream', handler });
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
   * Stops accepting calls (GOAWAY), tells streaming handlers to finish (`closing`), waits up to `timeoutMs`
   * for every call to end, then drops what is left. The socket file goes with the listener.
   */
  async close(timeoutMs = 10_000): Promise<void> {
    this.shutdown.abort();
    const closed = new Promise<void>((resolve) => this.server.close(() => resolve()));
    for (const s of this.sessions) s.close();
    let timer: NodeJS.Timeout | undefined;
    const drained = Promise.all([...this.inFlight]);
    const expired = new Promise<void>((resolve) => (timer = setTimeout(resolve, timeoutMs)));
    await Promise.race([drained, expired]);
    clearTimeout(timer);
    for (const s of this.sessions) s.destroy();
    await closed;
    if (this.socketPath) fs.rmSync(this.socketPath, { force: true });
  }

  private onStream(stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders): void {
    stream.on('error', () => undefined);
    if (headers[':method'] !== 'POST') return plainHttp(stream, 405);
    const contentType = headers['content-type'];
    if (typeof contentType !== 'string' || !contentType.startsWith('application/grpc')) return plainHttp(stream, 415);
    if (this.shutdown.signal.aborted) return trailersOnly(stream, { code: ServerStatus.UNAVAILABLE, message: 'server is shutting down' });
    const path = headers[':path'] ?? '';
    const route = this.routes.get(path);
    if (!route) return trailersOnly(stream, { code: ServerStatus.UNIMPLEMENTED, message: `method ${path} is not implemented` });
    let timeoutMs: number | undefined;
    const rawTimeout = headers['grpc-timeout'];
    if (rawTimeout !== undefined) {
      timeoutMs = parseTimeout(String(rawTimeout));
      if (timeoutMs === undefined)
        return trailersOnly(stream, { code: ServerStatus.INTERNAL, message: `malformed grpc-timeout: ${String(rawTimeout)}` });
    }
    const closed = new Promise<void>((resolve) => stream.once('close', resolve));
    const run = this.run(stream, headers, route, timeoutMs).catch(() => undefined);
    const done = Promise.all([run, closed]).then(() => undefined);
    this.inFlight.add(done);
    void done.finally(() => this.inFlight.delete(done));
  }

  private async run(stream: http2.ServerHttp2Stream, headers: http2.IncomingHttpHeaders, route: Route, timeoutMs?: number): Promise<void> {
    const abort = new AbortController();
    let over = false;
    let timer: NodeJS.Timeout | undefined;
    const finish = (status: Status): void => {
      if (over) return;
      over = true;
      clearTimeout(timer);
      if (status.code !== ServerStatus.OK) abort.abort();
      if (stream.destroyed) return;
      if (!stream.headersSent) return trailersOnly(stream, status);
      // Response-Headers went out with the first message: Trailers now end the stream
      stream.once('wantTrailers', () => stream.sendTrailers(trailersOf(status)));
      stream.end();
      closeEarly(stream);
    };
    stream.once('close', () => {
      if (!over) {
        over = true;
        clearTimeout(timer);
        abort.abort();
      }
    });
    const deadline = timeoutMs === undefined ? undefined : Date.now() + timeoutMs;
    if (timeoutMs !== undefined && timeoutMs <= MAX_TIMER_MS)
      timer = setTimeout(() => finish({ code: ServerStatus.DEADLINE_EXCEEDED, message: 'Deadline exceeded' }), timeoutMs);
    let request: Buffer;
    try {
      request = await readMessage(stream, String(headers['grpc-encoding'] ?? 'identity'), this.maxReceive);
    } catch (err) {
      return finish(err instanceof GrpcStatusError ? statusOf(err) : { code: ServerStatus.INTERNAL, message: errorMessage(err) });
    }
    if (over) return;
    const call: CallContext = { service: route.service, method: route.method, headers, deadline, signal: abort.signal };
    try {
      if (route.kind === 'unary') {
        const response = await route.handler(request, call);
        if (over || stream.destroyed) return;
        over = true;
        clearTimeout(timer);
        stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
        stream.once('wantTrailers', () => stream.sendTrailers({ 'grpc-status': '0' }));
        stream.end(frame(response));
        closeEarly(stream);
        return;
      }
      const writer: ServerStreamWriter = {
        closing: this.shutdown.signal,
        write: (message) => {
          if (over || stream.destroyed) return false;
          if (!stream.headersSent) stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
          stream.write(frame(message));
          return true;
        },
      };
      await route.handler(request, call, writer);
      finish({ code: ServerStatus.OK, message: '' });
    } catch (err) {
      finish(err instanceof GrpcStatusError ? statusOf(err) : { code: ServerStatus.UNKNOWN, message: errorMessage(err) });
    }
  }
}
