/**
 * terwayd's TerwayServer (@cnikit/unary-grpc/server, codec.ts) against a real @grpc/grpc-js client on
 * proto-loader's definition (what the server was before) and against the terway binary's TerwayClient:
 * replies as sent, errors as the same gRPC statuses (UNAVAILABLE for transient failures, INVALID_ARGUMENT
 * for a TypeError, INTERNAL otherwise) and so the same CNI codes, metrics with the status names.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { CniError, TransientError } from '@cnikit/netlib';
import { TerwayServer } from '../src/daemon/server';
import type { TerwayDaemon } from '../src/daemon/daemon';
import { TerwayClient } from '../src/cni/client';
import { terwayService } from './grpc-descriptors';

let dir: string;
let socket: string;
let server: TerwayServer;
const calls: [string, string][] = [];
let failWith: Error | undefined;

const daemon = {
  allocIP: async (r: { K8sPodName: string }) => {
    if (failWith) throw failWith;
    return {
      Success: true,
      IPType: 'TypeENIMultiIP',
      IPv4: true,
      NetConfs: [{ BasicInfo: { PodIP: { IPv4: '192.168.0.10' } }, IfName: r.K8sPodName }],
    };
  },
  releaseIP: async (r: { Reason: string }) => ({ Success: r.Reason === 'bye', IPv4: true }),
  getIPInfo: async () => ({ Success: false, Error: 'no lease' }),
  recordEvent: async (e: { EventType: string }) => ({ Succeed: e.EventType === 'EventTypeWarning', Error: '' }),
  listLeases: async () => ({ Leases: [{ K8sPodName: 'a', IPv4: '192.168.0.10' }] }),
} as unknown as TerwayDaemon;

beforeEach(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'terway-server-'));
  socket = path.join(dir, 'eni.socket');
  calls.length = 0;
  failWith = undefined;
  server = new TerwayServer(daemon, socket, (method, _ms, error) => calls.push([method, error]));
  await server.start();
});
afterEach(async () => {
  await server.stop();
  fs.rmSync(dir, { recursive: true, force: true });
});

type Client = grpc.Client & Record<string, (r: object, cb: (e: grpc.ServiceError | null, o: Record<string, unknown>) => void) => void>;
function grpcCall(method: string, req: object): Promise<Record<string, unknown>> {
  const Ctor = grpc.makeGenericClientConstructor(terwayService(), 'TerwayBackend');
  const client = new Ctor(`unix://${socket}`, grpc.credentials.createInsecure()) as unknown as Client;
  return new Promise<Record<string, unknown>>((resolve, reject) => client[method]!(req, (e, o) => (e ? reject(e) : resolve(o)))).finally(
    () => client.close(),
  );
}

const ref = { K8sPodName: 'web-0', K8sPodNamespace: 'default', K8sPodInfraContainerId: 'c', Netns: '/n', IfName: 'eth0' };

it('serves every method to a grpc-js client, the socket mode 0600', async () => {
  expect(fs.statSync(socket).mode & 0o777).toBe(0o600);
  const alloc = await grpcCall('AllocIP', ref);
  expect(alloc).toMatchObject({ Success: true, IPType: 'TypeENIMultiIP', IPv4: true, IPv6: false });
  expect(alloc['NetConfs']).toEqual([
    expect.objectContaining({ IfName: 'web-0', BasicInfo: expect.objectContaining({ PodIP: { IPv4: '192.168.0.10', IPv6: '' } }) }),
  ]);
  expect(await grpcCall('ReleaseIP', { ...ref, Reason: 'bye' })).toEqual({ Success: true, IPv4: true, IPv6: false });
  expect(await grpcCall('GetIPInfo', ref)).toMatchObject({ Success: false, Error: 'no lease' });
  expect(await grpcCall('RecordEvent', { EventType: 'EventTypeWarning' })).toEqual({ Succeed: true, Error: '' });
  expect(await grpcCall('ListLeases', {})).toEqual({
    Leases: [{ K8sPodNamespace: '', K8sPodName: 'a', ContainerId: '', Netns: '', IPv4: '192.168.0.10', IPv6: '' }],
  });
  expect(calls).toEqual([
    ['AllocIP', ''],
    ['ReleaseIP', ''],
    ['GetIPInfo', ''],
    ['RecordEvent', ''],
    ['ListLeases', ''],
  ]);
});

it('errors: the same statuses and messages as before, the binary sees the same CNI codes', async () => {
  const client = new TerwayClient(socket, 5000);
  for (const [err, code, name, cniCode] of [
    [new TransientError('pool exhausted', ''), grpc.status.UNAVAILABLE, 'UNAVAILABLE', 11],
    [new TypeError('terwayd: K8sPodNamespace and K8sPodName are required'), grpc.status.INVALID_ARGUMENT, 'INVALID_ARGUMENT', 999],
    [new Error('boom ü'), grpc.status.INTERNAL, 'INTERNAL', 999],
  ] as const) {
    failWith = err;
    await expect(grpcCall('AllocIP', ref)).rejects.toMatchObject({ code, details: err.message });
    const e = await client.allocIP(ref).catch((x: unknown) => x);
    expect(e).toBeInstanceOf(CniError);
    expect((e as CniError).code).toBe(cniCode);
    expect((e as Error).message).toContain(err.message);
    expect(calls.slice(-2)).toEqual([
      ['AllocIP', name],
      ['AllocIP', name],
    ]);
  }
});

it('an unknown method is UNIMPLEMENTED', async () => {
  const client = new grpc.Client(`unix://${socket}`, grpc.credentials.createInsecure());
  const e = await new Promise<grpc.ServiceError | null>((r) =>
    client.makeUnaryRequest(
      '/rpc.TerwayBackend/Nope',
      (x: Buffer) => x,
      (x: Buffer) => x,
      Buffer.alloc(0),
      (err) => r(err),
    ),
  );
  client.close();
  expect(e?.code).toBe(grpc.status.UNIMPLEMENTED);
});
