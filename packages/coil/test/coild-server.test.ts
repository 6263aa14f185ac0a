/**
 * coild's gRPC server (src/coild/server.ts, on @cnikit/unary-grpc/server) in front of a stand-in Coild, no
 * root or cluster needed: the socket (stale file replaced, mode 0600, gone after close), every verb through
 * the `coil` binary's client, a failure as INTERNAL with the CNIError in a google.rpc.Status detail,
 * go-grpc-prometheus' metrics, and @grpc/grpc-js's client against it (what a Go or grpc-js caller sees).
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { CniCode, CniError } from '@cnikit/netlib';
import { Registry } from '@cnikit/kube/prom';
import { CoildServer } from '../src/coild/server';
import type { Coild } from '../src/coild/coild';
import { RpcError, unaryCall } from '../src/rpc/client';
import { SERVICE, cniErrorFromStatus, decodeAddResponse, encodeCNIArgs, type CNIArgs } from '../src/rpc/codec';

const seen: [string, CNIArgs | undefined][] = [];
const stand = {
  add: async (a: CNIArgs) => {
    seen.push(['add', a]);
    if (a.containerId === 'full') throw new CniError(11, 'no IP left', 'pool "default" — 100% used');
    if (a.containerId === 'boom') throw new Error('plain failure');
    return { cniVersion: '1.0.0', ips: [{ address: '10.0.0.5/32' }] };
  },
  del: async (a: CNIArgs) => void seen.push(['del', a]),
  check: async (a: CNIArgs) => void seen.push(['check', a]),
  gc: async (a: CNIArgs) => void seen.push(['gc', a]),
  status: async () => void seen.push(['status', undefined]),
} as unknown as Coild;

let dir: string;
let socket: string;
let registry: Registry;
let server: CoildServer;

beforeAll(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'coild-server-'));
  socket = path.join(dir, 'coild.sock');
  fs.writeFileSync(socket, 'stale'); // a previous coild's leftover
  registry = new Registry();
  server = new CoildServer(stand, { socketPath: socket, registry });
  await server.listen();
});

afterAll(async () => {
  await server?.close();
  fs.rmSync(dir, { recursive: true, force: true });
});

const args = (containerId: string): Partial<CNIArgs> => ({
  containerId,
  netns: '/var/run/netns/x',
  ifname: 'eth0',
  args: { K8S_POD_NAME: 'p', K8S_POD_NAMESPACE: 'default' },
  stdinData: Buffer.from('{"cniVersion":"1.0.0"}'),
});

async function rpcFailure(p: Promise<unknown>): Promise<RpcError> {
  const e = await p.then(
    () => undefined,
    (err: unknown) => err,
  );
  if (!(e instanceof RpcError)) throw new Error(`expected an RpcError, got ${String(e)}`);
  return e;
}

it('replaces a stale socket file with its own, mode 0600', () => {
  const st = fs.statSync(socket);
  expect(st.isSocket()).toBe(true);
  expect(st.mode & 0o777).toBe(0o600);
});

it('every verb through the coil client', async () => {
  seen.length = 0;
  const add = decodeAddResponse(await unaryCall(socket, 'Add', encodeCNIArgs(args('c1')), 5_000));
  expect(JSON.parse(add.toString())).toEqual({ cniVersion: '1.0.0', ips: [{ address: '10.0.0.5/32' }] });
  for (const m of ['Del', 'Check', 'GC', 'Status'])
    expect(await unaryCall(socket, m, encodeCNIArgs(args('c1')), 5_000)).toEqual(Buffer.alloc(0));
  expect(seen.map(([v]) => v)).toEqual(['add', 'del', 'check', 'gc', 'status']);
  expect(seen[0]![1]).toMatchObject({ containerId: 'c1', ifname: 'eth0', args: { K8S_POD_NAME: 'p' } });
});

it('a CniError: INTERNAL, the message, the CNIError (code, msg, details) in grpc-status-details-bin', async () => {
  const e = await rpcFailure(unaryCall(socket, 'Add', encodeCNIArgs(args('full')), 5_000));
  expect(e.grpcCode).toBe(13);
  expect(e.message).toBe('no IP left: pool "default" — 100% used');
  expect(e.cniError).toEqual({ code: 11, msg: 'no IP left', details: 'pool "default" — 100% used' });
});

it('any other failure: INTERNAL with a CNIError of code Internal', async () => {
  const e = await rpcFailure(unaryCall(socket, 'Add', encodeCNIArgs(args('boom')), 5_000));
  expect(e.grpcCode).toBe(13);
  expect(e.cniError).toEqual({ code: CniCode.Internal, msg: 'plain failure', details: '' });
});

it("go-grpc-prometheus' metrics with its labels", async () => {
  const text = await registry.metrics();
  const labels = `grpc_type="unary",grpc_service="${SERVICE}",grpc_method="Add"`;
  expect(text).toContain(`grpc_server_started_total{${labels}} 3`);
  expect(text).toContain(`grpc_server_handled_total{${labels},grpc_code="OK"} 1`);
  expect(text).toContain(`grpc_server_handled_total{${labels},grpc_code="Internal"} 2`);
  expect(text).toMatch(/^grpc_server_handling_seconds_bucket\{[^}]*grpc_method="Add"[^}]*\} 3$/m);
  expect(text).toContain(`grpc_server_handling_seconds_count{${labels}} 3`);
  expect(text).toContain(`grpc_server_handled_total{grpc_type="unary",grpc_service="${SERVICE}",grpc_method="Status",grpc_code="OK"} 1`);
});

describe('@grpc/grpc-js client', () => {
  let client: grpc.Client;
  beforeAll(() => {
    client = new grpc.Client(`unix://${socket}`, grpc.credentials.createInsecure());
  });
  afterAll(() => client.close());

  const call = (method: string, a: Partial<CNIArgs>): Promise<Buffer> =>
    new Promise((resolve, reject) =>
      client.makeUnaryRequest(
        `/${SERVICE}/${method}`,
        (x: Partial<CNIArgs>) => encodeCNIArgs(x),
        (b: Buffer) => b,
        a,
        new grpc.Metadata(),
        { deadline: Date.now() + 5_000 },
        (err, res) => (err ? reject(err) : resolve(res!)),
      ),
    );

  it('Add answers the result', async () => {
    expect(JSON.parse(decodeAddResponse(await call('Add', args('g1'))).toString())).toMatchObject({ ips: [{ address: '10.0.0.5/32' }] });
  });

  it('a failure: INTERNAL, the details a google.rpc.Status with the CNIError', async () => {
    const e = (await call('Add', args('full')).then(
      () => undefined,
      (err: grpc.ServiceError) => err,
    ))!;
    expect(e.code).toBe(grpc.status.INTERNAL);
    expect(e.details).toBe('no IP left: pool "default" — 100% used');
    const status = e.metadata.get('grpc-status-details-bin')[0] as Buffer;
    expect(cniErrorFromStatus(status)).toEqual({ code: 11, msg: 'no IP left', details: 'pool "default" — 100% used' });
  });

  it('a method coild does not have: UNIMPLEMENTED', async () => {
    const e = (await call('Nope', args('g2')).then(
      () => undefined,
      (err: grpc.ServiceError) => err,
    ))!;
    expect(e.code).toBe(grpc.status.UNIMPLEMENTED);
  });
});

it('close removes the socket', async () => {
  await server.close();
  expect(fs.existsSync(socket)).toBe(false);
  server = undefined as unknown as CoildServer;
});
