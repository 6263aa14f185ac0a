/**
 * The unary client against a real @grpc/grpc-js server (the daemons' side) on a UNIX socket: every
 * answer it must read back (OK, error statuses with messages and metadata in HPACK-coded trailers,
 * messages over the default frame size and flow-control windows) and every way a call fails locally.
 * Each case runs twice: on node:net (daemons, in-process callers) and on netlib's blocking socket (what a
 * plugin binary uses). The servers run in a child process (fixtures/servers.js), since a blocked client
 * would starve a server in its own process.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { serveInTempDir } from '@cnikit/netlib-testing';
import { allowBlockingSockets } from '@cnikit/netlib/unix';
import { GrpcConnectError, GrpcStatus, frameMessage, unaryCall } from '../src';
import { failure } from './support';

const FAIL_MESSAGE = 'pool "blue": no IP left — 100% used';
let dir: string;
let socket: string;
let servers: { stop(): Promise<void> };

beforeAll(async () => {
  ({ dir, ...servers } = await serveInTempDir('unary-grpc-', [process.execPath, path.join(__dirname, 'fixtures', 'servers.js')]));
  socket = path.join(dir, 'rpc.sock');
});

afterAll(() => servers.stop());

const inspect = async (metadata?: [string, string][]): Promise<{ left: number; namespace: string | null }> =>
  JSON.parse((await unaryCall(socket, '/test.Echo/Inspect', Buffer.alloc(0), 30_000, metadata)).toString()) as {
    left: number;
    namespace: string | null;
  };

describe.each([
  ['on node:net', false],
  ['on a blocking socket', true],
])('unaryCall %s', (_name, blocking) => {
  beforeAll(() => allowBlockingSockets(blocking));
  afterAll(() => allowBlockingSockets(false));

  describe('against @grpc/grpc-js', () => {
    it('answers the reply message; the deadline reaches the server as grpc-timeout', async () => {
      expect((await unaryCall(socket, '/test.Echo/Echo', Buffer.from('hello'), 30_000)).toString()).toBe('hello');
      const { left } = await inspect();
      expect(left).toBeGreaterThan(25_000);
      expect(left).toBeLessThanOrEqual(30_000);
    });

    it("request metadata reaches the server beside gRPC's own headers", async () => {
      expect((await inspect([['containerd-namespace', 'k8s.io']])).namespace).toBe('k8s.io');
      expect((await inspect()).namespace).toBeNull();
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

    // grpc-js also ends the call at the grpc-timeout we send, so either side may call it first; that our own
    // deadline holds without a server's help is the mute listener's case below.
    it('a server that does not answer in time: DEADLINE_EXCEEDED, after the deadline and not much later', async () => {
      const t0 = Date.now();
      const e = await failure(unaryCall(socket, '/test.Echo/Hang', Buffer.alloc(0), 300));
      expect(e.code).toBe(GrpcStatus.DEADLINE_EXCEEDED);
      expect(Date.now() - t0).toBeGreaterThanOrEqual(295);
      expect(Date.now() - t0).toBeLessThan(3_000);
    });
  });

  describe('without a gRPC server', () => {
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
      const t0 = Date.now();
      const e = await failure(unaryCall(path.join(dir, 'mute.sock'), '/test.Echo/Echo', Buffer.alloc(0), 200));
      expect(e).toMatchObject({ code: GrpcStatus.DEADLINE_EXCEEDED, message: 'deadline of 200 ms exceeded', local: true });
      expect(Date.now() - t0).toBeGreaterThanOrEqual(195);
      expect(Date.now() - t0).toBeLessThan(3_000);
    });

    it('a listener that hangs up mid-call: UNAVAILABLE', async () => {
      const e = await failure(unaryCall(path.join(dir, 'rude.sock'), '/test.Echo/Echo', Buffer.alloc(0), 5_000));
      expect(e).toMatchObject({ code: GrpcStatus.UNAVAILABLE, local: true, message: 'connection closed before the response ended' });
      expect(e).not.toBeInstanceOf(GrpcConnectError);
    });
  });
});

describe('frameMessage', () => {
  it('prefixes a message with an uncompressed flag and its 4-byte length', () => {
    expect(frameMessage(Buffer.from([1, 2])).toString('hex')).toBe('00000000020102');
  });
});
