/**
 * GrpcServer's server-streaming methods (src/server.ts) against @grpc/grpc-js's client: unary methods as GrpcServer
 * answers them, a server-streaming method writing several messages over time and ending with OK trailers
 * or an error's status (Trailers-Only before any message), the client cancelling (the handler's signal
 * aborts), the server closing (`closing` aborts, the stream ends OK), an unknown method, the deadline.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { GrpcServer, GrpcStatusError, GrpcStatus } from '../src/server';

const SERVICE = 'test.v1.Watch';
const id = (b: Buffer): Buffer => b;

let dir: string;
let socket: string;
let server: GrpcServer;
let aborted: (() => void) | undefined;
let closingSeen: (() => void) | undefined;
let push: ((b: Buffer) => boolean) | undefined;

beforeEach(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'stream-server-'));
  socket = path.join(dir, 'rpc.sock');
  server = new GrpcServer();
  server
    .addService(SERVICE, {
      Echo: async (req) => req,
      Fail: async () => {
        throw new GrpcStatusError(GrpcStatus.UNAVAILABLE, 'later — 100%');
      },
      Slow: (_req, call) => new Promise((_r, j) => call.signal.addEventListener('abort', () => j(new Error('aborted')))),
    })
    .addServerStreaming(SERVICE, {
      Count: async (req, _call, stream) => {
        for (let i = 0; i < req[0]!; i++) {
          stream.write(Buffer.from([i]));
          await new Promise((r) => setTimeout(r, 5));
        }
      },
      FailAfter: async (req, _call, stream) => {
        for (let i = 0; i < req[0]!; i++) stream.write(Buffer.from([i]));
        throw new GrpcStatusError(GrpcStatus.RESOURCE_EXHAUSTED, 'no more');
      },
      Watch: async (_req, call, stream) => {
        push = (b) => stream.write(b);
        stream.write(Buffer.from('first'));
        await new Promise<void>((resolve) => {
          call.signal.addEventListener('abort', () => (aborted?.(), resolve()));
          stream.closing.addEventListener('abort', () => (closingSeen?.(), resolve()));
        });
      },
      Throws: async () => {
        throw new Error('plain');
      },
    });
  await server.listen(socket);
});

afterEach(async () => {
  await server.close(2000);
  fs.rmSync(dir, { recursive: true, force: true });
});

function client(): grpc.Client {
  return new grpc.Client(`unix://${socket}`, grpc.credentials.createInsecure());
}

function unary(method: string, req: Buffer, deadline?: number): Promise<Buffer> {
  const c = client();
  return new Promise<Buffer>((resolve, reject) =>
    c.makeUnaryRequest(`/${SERVICE}/${method}`, id, id, req, deadline ? { deadline: Date.now() + deadline } : {}, (e, r) =>
      e ? reject(e) : resolve(r!),
    ),
  ).finally(() => c.close());
}

/** Every message of a server-streaming call and how it ended. */
function collect(method: string, req: Buffer): Promise<{ messages: Buffer[]; status: grpc.StatusObject; error?: grpc.ServiceError }> {
  const c = client();
  const call = c.makeServerStreamRequest(`/${SERVICE}/${method}`, id, id, req);
  const messages: Buffer[] = [];
  let error: grpc.ServiceError | undefined;
  call.on('data', (m: Buffer) => messages.push(m));
  call.on('error', (e: grpc.ServiceError) => (error = e));
  return new Promise((resolve) =>
    call.on('status', (status: grpc.StatusObject) => setImmediate(() => resolve({ messages, status, error }))),
  ).finally(() => c.close()) as Promise<{ messages: Buffer[]; status: grpc.StatusObject; error?: grpc.ServiceError }>;
}

it('unary methods: OK, an error status with a percent-encoded message, the deadline', async () => {
  expect(await unary('Echo', Buffer.from('hi'))).toEqual(Buffer.from('hi'));
  expect(await unary('Echo', Buffer.alloc(0))).toEqual(Buffer.alloc(0));
  await expect(unary('Fail', Buffer.alloc(0))).rejects.toMatchObject({ code: grpc.status.UNAVAILABLE, details: 'later — 100%' });
  await expect(unary('Slow', Buffer.alloc(0), 100)).rejects.toMatchObject({ code: grpc.status.DEADLINE_EXCEEDED });
});

it('a server-streaming call: several messages over time, then OK trailers', async () => {
  const r = await collect('Count', Buffer.from([5]));
  expect(r.messages).toEqual([0, 1, 2, 3, 4].map((i) => Buffer.from([i])));
  expect(r.status.code).toBe(grpc.status.OK);
  expect(r.error).toBeUndefined();
  const none = await collect('Count', Buffer.from([0]));
  expect(none.messages).toEqual([]);
  expect(none.status.code).toBe(grpc.status.OK);
});

it('a handler that throws: its status in the trailers after its messages, or Trailers-Only before any', async () => {
  const after = await collect('FailAfter', Buffer.from([2]));
  expect(after.messages).toHaveLength(2);
  expect(after.status).toMatchObject({ code: grpc.status.RESOURCE_EXHAUSTED, details: 'no more' });
  const before = await collect('FailAfter', Buffer.from([0]));
  expect(before.messages).toHaveLength(0);
  expect(before.status.code).toBe(grpc.status.RESOURCE_EXHAUSTED);
  const plain = await collect('Throws', Buffer.alloc(0));
  expect(plain.status).toMatchObject({ code: grpc.status.UNKNOWN, details: 'plain' });
});

it('the client cancelling aborts the handler; later writes report the call over', async () => {
  const gone = new Promise<void>((r) => (aborted = r));
  const c = client();
  const call = c.makeServerStreamRequest(`/${SERVICE}/Watch`, id, id, Buffer.alloc(0));
  call.on('error', () => undefined);
  const first = await new Promise<Buffer>((r) => call.once('data', r));
  expect(first.toString()).toBe('first');
  const second = new Promise<Buffer>((r) => call.once('data', r));
  expect(push!(Buffer.from('second'))).toBe(true);
  expect((await second).toString()).toBe('second');
  call.cancel();
  await gone;
  expect(push!(Buffer.from('late'))).toBe(false);
  c.close();
});

it('the server closing: streaming handlers see `closing` and the stream ends OK; new calls are refused', async () => {
  const seen = new Promise<void>((r) => (closingSeen = r));
  const c = client();
  const call = c.makeServerStreamRequest(`/${SERVICE}/Watch`, id, id, Buffer.alloc(0));
  const messages: string[] = [];
  call.on('data', (m: Buffer) => messages.push(m.toString()));
  const status = new Promise<grpc.StatusObject>((r) => call.on('status', r));
  await new Promise((r) => call.once('data', r));
  const closed = server.close(2000);
  await seen;
  expect((await status).code).toBe(grpc.status.OK);
  expect(messages).toEqual(['first']);
  await closed;
  expect(fs.existsSync(socket)).toBe(false);
  c.close();
  server = new GrpcServer();
  await server.listen(socket);
});

it('an unknown method is UNIMPLEMENTED, a non-gRPC content-type HTTP 415', async () => {
  await expect(unary('Nope', Buffer.alloc(0))).rejects.toMatchObject({ code: grpc.status.UNIMPLEMENTED });
  const r = await collect('Nope', Buffer.alloc(0));
  expect(r.status.code).toBe(grpc.status.UNIMPLEMENTED);
  const http2 = await import('node:http2');
  const session = http2.connect('http://localhost', { createConnection: () => require('node:net').connect(socket) });
  const req = session.request({ ':method': 'POST', ':path': `/${SERVICE}/Echo`, 'content-type': 'application/json' });
  const status = await new Promise<number>((r) => req.on('response', (h) => r(Number(h[':status']))));
  req.close();
  session.close();
  expect(status).toBe(415);
});
