/**
 * The unary server (src/server.ts) on a UNIX socket, against our own client (unaryCall and the raw
 * HTTP/2 exchange under it, to see the frames' headers as sent) and against @grpc/grpc-js's client
 * (interoperability: OK, an error with details, an unknown method, the deadline, 1 MiB messages).
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { GrpcError, GrpcStatus, frameMessage, unaryCall } from '../src';
import { h2Post } from '../src/h2';
import { GrpcStatusError, GrpcServer, parseTimeout, percentEncode, type CallContext } from '../src/server';
import { failure } from './support';

const SERVICE = 'test.v1.Echo';
const DETAILS = Buffer.from([8, 13, 18, 3, 0xe2, 0x80, 0x94, 0xff]); // any bytes: base64 with padding to drop
const FAIL_MESSAGE = 'pool "blue": no IP left — 100% used\n';

let dir: string;
let socket: string;
let server: GrpcServer;
const handled: [string, number, number][] = [];
const started: string[] = [];
let lastCall: CallContext | undefined;
let hangAborted: Promise<void> = Promise.resolve();
let release: (() => void) | undefined;

beforeAll(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'unary-grpc-server-'));
  socket = path.join(dir, 'rpc.sock');
  server = new GrpcServer({
    metrics: {
      started: (service, method) => started.push(`${service}/${method}`),
      handled: (_service, method, code, seconds) => handled.push([method, code, seconds]),
    },
  });
  server.addService(SERVICE, {
    Echo: async (req, call) => ((lastCall = call), req),
    Fail: async () => {
      throw new GrpcStatusError(GrpcStatus.RESOURCE_EXHAUSTED, FAIL_MESSAGE, DETAILS);
    },
    Throw: async () => {
      throw new Error('plain failure');
    },
    Hang: (_req, call) => {
      hangAborted = new Promise((resolve) => call.signal.addEventListener('abort', () => resolve()));
      return new Promise<Buffer>(() => undefined);
    },
    Slow: () => new Promise<Buffer>((resolve) => (release = () => resolve(Buffer.from('late')))),
  });
  await server.listen(socket);
});

afterAll(async () => {
  await server.close(1_000);
  fs.rmSync(dir, { recursive: true, force: true });
});

const grpcHeaders = (more: [string, string][] = []): [string, string][] => [
  ['content-type', 'application/grpc'],
  ['te', 'trailers'],
  ...more,
];

function pattern(n: number): Buffer {
  const b = Buffer.alloc(n);
  for (let i = 0; i < n; i++) b[i] = (i * 7 + (i >> 8)) & 0xff;
  return b;
}

describe('the listener', () => {
  it('is a UNIX socket of mode 0600', () => {
    const st = fs.statSync(socket);
    expect(st.isSocket()).toBe(true);
    expect(st.mode & 0o777).toBe(0o600);
  });

  it('refuses a socket path that exists', async () => {
    const other = new GrpcServer();
    await expect(other.listen(socket)).rejects.toThrow(/EADDRINUSE/);
  });
});

describe('our client against our server', () => {
  it('OK: the reply message; the deadline reaches the handler from grpc-timeout; metrics called', async () => {
    handled.length = 0;
    const t0 = Date.now();
    expect((await unaryCall(socket, `/${SERVICE}/Echo`, Buffer.from('hello'), 30_000, [['x-who', 'me']])).toString()).toBe('hello');
    expect(lastCall).toMatchObject({ service: SERVICE, method: 'Echo' });
    expect(lastCall!.headers['x-who']).toBe('me');
    expect(lastCall!.deadline! - t0).toBeGreaterThan(25_000);
    expect(lastCall!.deadline! - t0).toBeLessThanOrEqual(31_000);
    expect(started).toContain(`${SERVICE}/Echo`);
    expect(handled).toEqual([['Echo', 0, expect.any(Number)]]);
    expect(handled[0]![2]).toBeGreaterThanOrEqual(0);
    expect(handled[0]![2]).toBeLessThan(5);
  });

  it('the response as the spec orders it: :status 200, content-type, the framed message, grpc-status 0', async () => {
    const res = await h2Post(socket, `/${SERVICE}/Echo`, grpcHeaders(), frameMessage(Buffer.from('abc')), 5_000);
    expect(res.headers).toMatchObject({ ':status': '200', 'content-type': 'application/grpc', 'grpc-status': '0' });
    expect(res.headers['grpc-message']).toBeUndefined();
    expect(res.body).toEqual(frameMessage(Buffer.from('abc')));
  });

  it('an empty request and reply', async () => {
    expect(await unaryCall(socket, `/${SERVICE}/Echo`, Buffer.alloc(0), 5_000)).toEqual(Buffer.alloc(0));
  });

  it('1 MiB each way', async () => {
    const big = pattern(1 << 20);
    const reply = await unaryCall(socket, `/${SERVICE}/Echo`, big, 30_000);
    expect(reply.equals(big)).toBe(true);
  });

  it('an error: trailers-only, the message percent-encoded, the details unpadded base64', async () => {
    handled.length = 0;
    const e = await failure(unaryCall(socket, `/${SERVICE}/Fail`, Buffer.from('x'), 5_000));
    expect(e).toMatchObject({ code: GrpcStatus.RESOURCE_EXHAUSTED, message: FAIL_MESSAGE, local: false });
    expect(Buffer.from(e.metadata['grpc-status-details-bin']!, 'base64')).toEqual(DETAILS);
    expect(handled).toEqual([['Fail', GrpcStatus.RESOURCE_EXHAUSTED, expect.any(Number)]]);

    const res = await h2Post(socket, `/${SERVICE}/Fail`, grpcHeaders(), frameMessage(Buffer.from('x')), 5_000);
    expect(res.body.length).toBe(0);
    expect(res.headers).toMatchObject({ ':status': '200', 'content-type': 'application/grpc', 'grpc-status': '8' });
    expect(res.headers['grpc-message']).toBe('pool "blue": no IP left %E2%80%94 100%25 used%0A');
    expect(res.headers['grpc-status-details-bin']).toBe(DETAILS.toString('base64').replace(/=+$/, ''));
    expect(res.headers['grpc-status-details-bin']).not.toMatch(/=/);
  });

  it('a handler that throws something else: UNKNOWN with its message', async () => {
    const e = await failure(unaryCall(socket, `/${SERVICE}/Throw`, Buffer.alloc(0), 5_000));
    expect(e).toMatchObject({ code: GrpcStatus.UNKNOWN, message: 'plain failure', local: false });
  });

  it('an unknown method or service: UNIMPLEMENTED, trailers-only, metrics untouched', async () => {
    handled.length = 0;
    for (const p of [`/${SERVICE}/Nope`, '/other.Svc/Echo', '/']) {
      const e = await failure(unaryCall(socket, p, Buffer.alloc(0), 5_000));
      expect(e).toMatchObject({ code: GrpcStatus.UNIMPLEMENTED, local: false });
      expect(e.message).toContain(p);
    }
    const res = await h2Post(socket, `/${SERVICE}/Nope`, grpcHeaders(), frameMessage(Buffer.alloc(0)), 5_000);
    expect(res.headers).toMatchObject({ ':status': '200', 'content-type': 'application/grpc', 'grpc-status': '12' });
    expect(res.body.length).toBe(0);
    expect(handled).toEqual([]);
  });

  it('a handler outliving grpc-timeout: DEADLINE_EXCEEDED from the server, the handler aborted', async () => {
    handled.length = 0;
    const t0 = Date.now();
    const res = await h2Post(socket, `/${SERVICE}/Hang`, grpcHeaders([['grpc-timeout', '200m']]), frameMessage(Buffer.alloc(0)), 5_000);
    expect(Date.now() - t0).toBeGreaterThanOrEqual(190);
    expect(Date.now() - t0).toBeLessThan(3_000);
    expect(res.headers).toMatchObject({ ':status': '200', 'grpc-status': String(GrpcStatus.DEADLINE_EXCEEDED) });
    await hangAborted;
    expect(handled).toEqual([['Hang', GrpcStatus.DEADLINE_EXCEEDED, expect.any(Number)]]);
    expect(handled[0]![2]).toBeGreaterThanOrEqual(0.19);
  });

  it('every grpc-timeout unit; a malformed one is INTERNAL', async () => {
    expect(parseTimeout('1H')).toBe(3_600_000);
    expect(parseTimeout('2M')).toBe(120_000);
    expect(parseTimeout('3S')).toBe(3_000);
    expect(parseTimeout('40m')).toBe(40);
    expect(parseTimeout('5000u')).toBe(5);
    expect(parseTimeout('7000000n')).toBe(7);
    for (const bad of ['', '1', 'm', '123456789m', '1.5S', '-1S', '10x', ' 1S']) expect(parseTimeout(bad)).toBeUndefined();
    const res = await h2Post(socket, `/${SERVICE}/Echo`, grpcHeaders([['grpc-timeout', '1.5S']]), frameMessage(Buffer.alloc(0)), 5_000);
    expect(res.headers['grpc-status']).toBe(String(GrpcStatus.INTERNAL));
  });

  it('percent-encoding: space and VCHAR but % as they are, every other byte of the UTF-8 as %XX', () => {
    expect(percentEncode(' !"#$&\'()*+,-./09:;<=>?@AZ[\\]^_`az{|}~')).toBe(' !"#$&\'()*+,-./09:;<=>?@AZ[\\]^_`az{|}~');
    expect(percentEncode('%')).toBe('%25');
    expect(percentEncode('a\tb\r\n\x7f')).toBe('a%09b%0D%0A%7F');
    expect(percentEncode('é€')).toBe('%C3%A9%E2%82%AC');
    expect(decodeURIComponent(percentEncode(FAIL_MESSAGE))).toBe(FAIL_MESSAGE);
  });
});

describe('requests the server refuses', () => {
  it('Compressed-Flag 1 without grpc-encoding: INTERNAL, the handler never called, no metrics', async () => {
    started.length = 0;
    handled.length = 0;
    const msg = frameMessage(Buffer.from('zz'));
    msg[0] = 1;
    const res = await h2Post(socket, `/${SERVICE}/Echo`, grpcHeaders(), msg, 5_000);
    expect(res.headers).toMatchObject({ ':status': '200', 'content-type': 'application/grpc', 'grpc-status': String(GrpcStatus.INTERNAL) });
    expect(decodeURIComponent(res.headers['grpc-message']!)).toMatch(/Compressed-Flag/);
    expect(res.body.length).toBe(0);
    expect(started).toEqual([]);
    expect(handled).toEqual([]);
  });

  it('Compressed-Flag 1 with a grpc-encoding we do not take: UNIMPLEMENTED, grpc-accept-encoding identity', async () => {
    const msg = frameMessage(Buffer.from('zz'));
    msg[0] = 1;
    const res = await h2Post(socket, `/${SERVICE}/Echo`, grpcHeaders([['grpc-encoding', 'gzip']]), msg, 5_000);
    expect(res.headers).toMatchObject({ 'grpc-status': String(GrpcStatus.UNIMPLEMENTED), 'grpc-accept-encoding': 'identity' });
    // the same encoding named but the message not compressed (flag 0) is fine
    const ok = await h2Post(socket, `/${SERVICE}/Echo`, grpcHeaders([['grpc-encoding', 'gzip']]), frameMessage(Buffer.from('zz')), 5_000);
    expect(ok.headers['grpc-status']).toBe('0');
  });

  it('a Compressed-Flag other than 0 or 1, a body cut short, none, or two messages: INTERNAL', async () => {
    const two = Buffer.concat([frameMessage(Buffer.from('a')), frameMessage(Buffer.from('b'))]);
    const bad = frameMessage(Buffer.from('a'));
    bad[0] = 2;
    for (const body of [bad, frameMessage(Buffer.from('abcd')).subarray(0, 7), Buffer.alloc(0), Buffer.from([0, 0]), two]) {
      const res = await h2Post(socket, `/${SERVICE}/Echo`, grpcHeaders(), body, 5_000);
      expect(res.headers['grpc-status']).toBe(String(GrpcStatus.INTERNAL));
    }
  });

  it('a message over the receive limit: RESOURCE_EXHAUSTED before the whole of it is read', async () => {
    const small = new GrpcServer({ maxReceiveMessageLength: 1024 });
    const sock = path.join(dir, 'small.sock');
    small.addService(SERVICE, { Echo: async (b) => b });
    await small.listen(sock);
    try {
      expect((await unaryCall(sock, `/${SERVICE}/Echo`, pattern(1024), 5_000)).length).toBe(1024);
      const e = await failure(unaryCall(sock, `/${SERVICE}/Echo`, pattern(1 << 20), 5_000));
      expect(e).toMatchObject({ code: GrpcStatus.RESOURCE_EXHAUSTED, local: false });
    } finally {
      await small.close();
    }
  });

  it('a content-type beginning with application/grpc is taken (+proto)', async () => {
    const res = await h2Post(
      socket,
      `/${SERVICE}/Echo`,
      [['content-type', 'application/grpc+proto']],
      frameMessage(Buffer.from('p')),
      5_000,
    );
    expect(res.headers['grpc-status']).toBe('0');
    expect(res.body).toEqual(frameMessage(Buffer.from('p')));
  });

  it('a content-type not application/grpc: HTTP 415', async () => {
    const res = await h2Post(socket, `/${SERVICE}/Echo`, [['content-type', 'text/plain']], frameMessage(Buffer.alloc(0)), 5_000);
    expect(res.headers[':status']).toBe('415');
    const e = await failure(
      (async () => {
        const r = await h2Post(socket, `/${SERVICE}/Echo`, [['content-type', 'application/json']], Buffer.alloc(0), 5_000);
        if (r.headers[':status'] !== '200') throw new GrpcError(GrpcStatus.UNKNOWN, `HTTP ${r.headers[':status']}`, false);
      })(),
    );
    expect(e.message).toBe('HTTP 415');
  });
});

describe('@grpc/grpc-js client against our server', () => {
  let client: grpc.Client;
  beforeAll(() => {
    client = new grpc.Client(`unix://${socket}`, grpc.credentials.createInsecure());
  });
  afterAll(() => client.close());

  const identity = (b: Buffer): Buffer => b;
  function call(method: string, req: Buffer, deadlineMs = 10_000): Promise<Buffer> {
    return new Promise((resolve, reject) =>
      client.makeUnaryRequest(
        `/${SERVICE}/${method}`,
        identity,
        identity,
        req,
        new grpc.Metadata(),
        { deadline: Date.now() + deadlineMs },
        (err, res) => (err ? reject(err) : resolve(res!)),
      ),
    );
  }
  async function grpcFailure(p: Promise<unknown>): Promise<grpc.ServiceError> {
    const e = await p.then(
      () => undefined,
      (err: unknown) => err,
    );
    if (!(e instanceof Error) || !('code' in e)) throw new Error(`expected a ServiceError, got ${String(e)}`);
    return e as grpc.ServiceError;
  }

  it('OK', async () => {
    expect((await call('Echo', Buffer.from('from grpc-js'))).toString()).toBe('from grpc-js');
    expect(lastCall!.headers['user-agent']).toMatch(/grpc-node-js/);
  });

  it('1 MiB each way', async () => {
    const big = pattern(1 << 20);
    expect((await call('Echo', big)).equals(big)).toBe(true);
  });

  it('an error with its message and details (grpc-status-details-bin, unpadded)', async () => {
    const e = await grpcFailure(call('Fail', Buffer.from('x')));
    expect(e.code).toBe(grpc.status.RESOURCE_EXHAUSTED);
    expect(e.details).toBe(FAIL_MESSAGE);
    expect(e.metadata.get('grpc-status-details-bin')[0]).toEqual(DETAILS);
  });

  it('an unknown method: UNIMPLEMENTED', async () => {
    const e = await grpcFailure(call('Nope', Buffer.alloc(0)));
    expect(e.code).toBe(grpc.status.UNIMPLEMENTED);
  });

  it('the deadline: DEADLINE_EXCEEDED, the server side ending the call too', async () => {
    handled.length = 0;
    const e = await grpcFailure(call('Hang', Buffer.alloc(0), 300));
    expect(e.code).toBe(grpc.status.DEADLINE_EXCEEDED);
    await hangAborted;
    expect(handled.map(([m, code]) => [m, code])).toEqual([['Hang', expect.any(Number)]]);
    expect([GrpcStatus.DEADLINE_EXCEEDED, GrpcStatus.CANCELLED]).toContain(handled[0]![1]);
  });

  it('many calls at once on one connection', async () => {
    const replies = await Promise.all(Array.from({ length: 50 }, (_, i) => call('Echo', Buffer.from(`n${i}`))));
    expect(replies.map(String)).toEqual(Array.from({ length: 50 }, (_, i) => `n${i}`));
  });
});

describe('close', () => {
  it('waits for the call in flight, refuses new connections, removes the socket', async () => {
    const s = new GrpcServer();
    const sock = path.join(dir, 'close.sock');
    s.addService(SERVICE, { Slow: () => new Promise<Buffer>((resolve) => (release = () => resolve(Buffer.from('late')))) });
    await s.listen(sock);
    const inFlight = unaryCall(sock, `/${SERVICE}/Slow`, Buffer.alloc(0), 10_000);
    while (!release) await new Promise((r) => setTimeout(r, 10));
    let closed = false;
    const closing = s.close(5_000).then(() => (closed = true));
    await new Promise((r) => setTimeout(r, 100));
    expect(closed).toBe(false);
    const refused = await failure(unaryCall(sock, `/${SERVICE}/Slow`, Buffer.alloc(0), 2_000));
    expect(refused.local).toBe(true);
    release!();
    expect((await inFlight).toString()).toBe('late');
    await closing;
    expect(fs.existsSync(sock)).toBe(false);
    release = undefined;
  });

  it('gives up on a call that outlives its timeout', async () => {
    const s = new GrpcServer();
    const sock = path.join(dir, 'close2.sock');
    s.addService(SERVICE, { Hang: () => new Promise<Buffer>(() => undefined) });
    await s.listen(sock);
    const inFlight = failure(unaryCall(sock, `/${SERVICE}/Hang`, Buffer.alloc(0), 10_000));
    await new Promise((r) => setTimeout(r, 100));
    const t0 = Date.now();
    await s.close(300);
    expect(Date.now() - t0).toBeLessThan(3_000);
    expect((await inFlight).code).toBe(GrpcStatus.UNAVAILABLE);
  });
});
