/**
 * The unary client against a real @grpc/grpc-js server (the daemons' side) on a UNIX socket: every
 * answer it must read back (OK, error statuses with messages and metadata in HPACK-coded trailers,
 * messages over the default frame size and flow-control windows) and every way a call fails locally.
 */
import * as fs from 'node:fs';
import * as net from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { GrpcConnectError, GrpcStatus, frameMessage, unaryCall } from '../src';
import { failure } from './support';

const identity = (b: Buffer): Buffer => b;
const method = (name: string): grpc.MethodDefinition<Buffer, Buffer> => ({
  path: `/test.Echo/${name}`,
  requestStream: false,
  responseStream: false,
  requestSerialize: identity,
  requestDeserialize: identity,
  responseSerialize: identity,
  responseDeserialize: identity,
});

const FAIL_MESSAGE = 'pool "blue": no IP left — 100% used';
let dir: string;
let socket: string;
let server: grpc.Server;
let seenDeadline: Date | number | undefined;
let seenNamespace: unknown;

beforeAll(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'unary-grpc-'));
  socket = path.join(dir, 'rpc.sock');
  server = new grpc.Server();
  server.addService({ Echo: method('Echo'), Fail: method('Fail'), Hang: method('Hang') } as grpc.ServiceDefinition, {
    Echo: (call: grpc.ServerUnaryCall<Buffer, Buffer>, cb: grpc.sendUnaryData<Buffer>) => {
      seenDeadline = call.getDeadline();
      seenNamespace = call.metadata.get('containerd-namespace')[0];
      const trailer = new grpc.Metadata();
      trailer.set('x-served-by', 'echo');
      cb(null, call.request, trailer);
    },
    Fail: (_call: grpc.ServerUnaryCall<Buffer, Buffer>, cb: grpc.sendUnaryData<Buffer>) => {
      const metadata = new grpc.Metadata();
      metadata.set('x-detail', 'the pool named blue');
      metadata.set('x-detail-bin', Buffer.from([0, 1, 2, 250]));
      cb({ code: grpc.status.RESOURCE_EXHAUSTED, details: FAIL_MESSAGE, metadata });
    },
    Hang: () => undefined,
  });
  await new Promise<void>((resolve, reject) =>
    server.bindAsync(`unix://${socket}`, grpc.ServerCredentials.createInsecure(), (e) => (e ? reject(e) : resolve())),
  );
});

afterAll(async () => {
  server.forceShutdown();
  fs.rmSync(dir, { recursive: true, force: true });
});

describe('unaryCall against @grpc/grpc-js', () => {
  it('answers the reply message; the deadline reaches the server as grpc-timeout', async () => {
    const t0 = Date.now();
    const reply = await unaryCall(socket, '/test.Echo/Echo', Buffer.from('hello'), 30_000);
    expect(reply.toString()).toBe('hello');
    const deadline = seenDeadline instanceof Date ? seenDeadline.getTime() : Number(seenDeadline);
    expect(deadline - t0).toBeGreaterThan(25_000);
    expect(deadline - t0).toBeLessThanOrEqual(31_000);
  });

  it("request metadata reaches the server beside gRPC's own headers", async () => {
    await unaryCall(socket, '/test.Echo/Echo', Buffer.alloc(0), 5_000, [['containerd-namespace', 'k8s.io']]);
    expect(seenNamespace).toBe('k8s.io');
    await unaryCall(socket, '/test.Echo/Echo', Buffer.alloc(0), 5_000);
    expect(seenNamespace).toBeUndefined();
  });

  it('an empty request and reply', async () => {
    expect(await unaryCall(socket, '/test.Echo/Echo', Buffer.alloc(0), 5_000)).toEqual(Buffer.alloc(0));
  });

  it('a message of 1 MiB each way spans many frames and more than the initial flow-control windows', async () => {
    const big = Buffer.alloc(1 << 20);
    for (let i = 0; i < big.length; i++) big[i] = (i * 7) & 0xff;
    const reply = await unaryCall(socket, '/test.Echo/Echo', big, 30_000);
    expect(reply.length).toBe(big.length);
    expect(reply.equals(big)).toBe(true);
  });

  it('an error status with its UTF-8 message and metadata from the HPACK-coded trailers', async () => {
    const e = await failure(unaryCall(socket, '/test.Echo/Fail', Buffer.from('x'), 5_000));
    expect(e).toMatchObject({ code: GrpcStatus.RESOURCE_EXHAUSTED, message: FAIL_MESSAGE, local: false });
    expect(e.metadata['x-detail']).toBe('the pool named blue');
    expect(Buffer.from(e.metadata['x-detail-bin']!, 'base64')).toEqual(Buffer.from([0, 1, 2, 250]));
  });

  it('a method the server does not have: UNIMPLEMENTED', async () => {
    const e = await failure(unaryCall(socket, '/test.Echo/Nope', Buffer.alloc(0), 5_000));
    expect(e).toMatchObject({ code: 12, local: false });
    expect(e.message).toMatch(/Nope/);
  });

  it('a server that does not answer in time: DEADLINE_EXCEEDED, after the deadline and not much later', async () => {
    const t0 = Date.now();
    const e = await failure(unaryCall(socket, '/test.Echo/Hang', Buffer.alloc(0), 300));
    expect(e).toMatchObject({ code: GrpcStatus.DEADLINE_EXCEEDED, message: 'deadline of 300 ms exceeded', local: true });
    expect(Date.now() - t0).toBeGreaterThanOrEqual(295);
    expect(Date.now() - t0).toBeLessThan(3_000);
  });
});

describe('unaryCall without a gRPC server', () => {
  it('no socket: GrpcConnectError (UNAVAILABLE) naming the socket', async () => {
    const missing = path.join(dir, 'none.sock');
    const e = await failure(unaryCall(missing, '/test.Echo/Echo', Buffer.alloc(0), 5_000));
    expect(e).toBeInstanceOf(GrpcConnectError);
    expect(e).toMatchObject({ code: GrpcStatus.UNAVAILABLE, local: true });
    expect(e.message).toContain(`no connection to ${missing}: connect ENOENT`);
  });

  it('a socket file nobody listens on: GrpcConnectError', async () => {
    const stale = path.join(dir, 'stale.sock');
    fs.writeFileSync(stale, '');
    const e = await failure(unaryCall(stale, '/test.Echo/Echo', Buffer.alloc(0), 5_000));
    expect(e).toBeInstanceOf(GrpcConnectError);
  });

  it('a listener that accepts and never speaks HTTP/2: DEADLINE_EXCEEDED', async () => {
    const mute = path.join(dir, 'mute.sock');
    const held: net.Socket[] = [];
    const srv = net.createServer((c) => void held.push(c));
    await new Promise<void>((r) => srv.listen(mute, r));
    try {
      const e = await failure(unaryCall(mute, '/test.Echo/Echo', Buffer.alloc(0), 200));
      expect(e).toMatchObject({ code: GrpcStatus.DEADLINE_EXCEEDED, local: true });
    } finally {
      for (const c of held) c.destroy();
      await new Promise((r) => srv.close(r));
    }
  });

  it('a listener that hangs up mid-call: UNAVAILABLE', async () => {
    const rude = path.join(dir, 'rude.sock');
    const srv = net.createServer((c) => c.once('data', () => c.destroy()));
    await new Promise<void>((r) => srv.listen(rude, r));
    try {
      const e = await failure(unaryCall(rude, '/test.Echo/Echo', Buffer.alloc(0), 5_000));
      expect(e).toMatchObject({ code: GrpcStatus.UNAVAILABLE, local: true, message: 'connection closed before the response ended' });
      expect(e).not.toBeInstanceOf(GrpcConnectError);
    } finally {
      await new Promise((r) => srv.close(r));
    }
  });
});

describe('frameMessage', () => {
  it('prefixes a message with an uncompressed flag and its 4-byte length', () => {
    expect(frameMessage(Buffer.from([1, 2])).toString('hex')).toBe('00000000020102');
  });
});
