/**
 * The gRPC side of coild: service pkg.cnirpc.CNI on a UNIX socket (mode 0600) with @cnikit/unary-grpc's
 * unary server on node:http2 and the hand-written codec (no gRPC library, no proto-loader; @grpc/grpc-js
 * cost coild ~1.3 MB of bundled JavaScript and its resident memory, docs/coil.md). A failed verb answers
 * INTERNAL with a google.rpc.Status detail carrying the CNIError (code, msg, details), so the CNI error code
 * survives the boundary. Server metrics are go-grpc-prometheus' (grpc_server_started_total,
 * grpc_server_handled_total, grpc_server_handling_seconds).
 */
import * as fs from 'node:fs';
import { CniCode, CniError } from '@cnikit/netlib';
import { MetricsIn } from '@cnikit/kube';
import type { Registry } from '@cnikit/kube/prom';
import { GrpcStatusError, GrpcServer, type ServerMetrics, type UnaryHandler } from '@cnikit/unary-grpc/server';
import { SERVICE, decodeCNIArgs, encodeAddResponse, encodeStatusWithCNIError, type CNIArgs } from '../rpc/codec';
import type { Coild } from './coild';

const GRPC_INTERNAL = 13;
/** go-grpc-prometheus' grpc_code label: grpc-go's codes.Code names. */
const CODE_NAMES = [
  'OK',
  'Canceled',
  'Unknown',
  'InvalidArgument',
  'DeadlineExceeded',
  'NotFound',
  'AlreadyExists',
  'PermissionDenied',
  'ResourceExhausted',
  'FailedPrecondition',
  'Aborted',
  'OutOfRange',
  'Unimplemented',
  'Internal',
  'Unavailable',
  'DataLoss',
  'Unauthenticated',
];

type Method = 'Add' | 'Del' | 'Check' | 'GC' | 'Status';

export interface CoildServerOptions {
  socketPath: string;
  registry?: Registry;
}

export class CoildServer {
  private readonly server: GrpcServer;

  constructor(
    coild: Coild,
    private readonly opts: CoildServerOptions,
  ) {
    this.server = new GrpcServer({ metrics: opts.registry && grpcMetrics(opts.registry) });
    const verbs: Record<Method, (a: CNIArgs) => Promise<Buffer>> = {
      Add: async (a) => encodeAddResponse(JSON.stringify(await coild.add(a))),
      Del: async (a) => (await coild.del(a), Buffer.alloc(0)),
      Check: async (a) => (await coild.check(a), Buffer.alloc(0)),
      GC: async (a) => (await coild.gc(a), Buffer.alloc(0)),
      Status: async () => (await coild.status(), Buffer.alloc(0)),
    };
    const handlers: Record<string, UnaryHandler> = {};
    for (const m of Object.keys(verbs) as Method[]) {
      handlers[m] = async (request) => {
        try {
          return await verbs[m](decodeCNIArgs(request));
        } catch (err) {
          throw toStatusError(err);
        }
      };
    }
    this.server.addService(SERVICE, handlers);
  }

  /** Listens on the socket (a stale one left by a previous coild removed first), mode 0600. */
  async listen(): Promise<void> {
    fs.rmSync(this.opts.socketPath, { force: true });
    await this.server.listen(this.opts.socketPath, 0o600);
  }

  /** Stops taking calls, lets those in flight answer, removes the socket. */
  async close(): Promise<void> {
    await this.server.close();
    fs.rmSync(this.opts.socketPath, { force: true });
  }
}

/** go-grpc-prometheus' server metrics, labelled as it labels them. */
function grpcMetrics(registry: Registry): ServerMetrics {
  const m = new MetricsIn(registry);
  const labelNames = ['grpc_type', 'grpc_service', 'grpc_method'] as const;
  const started = m.counter('grpc_server_started_total', 'Total number of RPCs started on the server.', labelNames);
  const handled = m.counter(
    'grpc_server_handled_total',
    'Total number of RPCs completed on the server, regardless of success or failure.',
    [...labelNames, 'grpc_code'],
  );
  const seconds = m.histogram(
    'grpc_server_handling_seconds',
    'Histogram of response latency (seconds) of gRPC that had been application-level handled by the server.',
    labelNames,
    [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
  );
  const labels = (service: string, method: string) => ({ grpc_type: 'unary', grpc_service: service, grpc_method: method });
  return {
    started: (service, method) => started.inc(labels(service, method)),
    handled: (service, method, code, secs) => {
      seconds.observe(labels(service, method), secs);
      handled.inc({ ...labels(service, method), grpc_code: CODE_NAMES[code] ?? `Code(${code})` });
    },
  };
}

function toStatusError(err: unknown): GrpcStatusError {
  const e = err instanceof CniError ? err : new CniError(CniCode.Internal, (err as Error)?.message ?? String(err));
  const details = encodeStatusWithCNIError(GRPC_INTERNAL, e.message, { code: e.code, msg: e.msg, details: e.details });
  return new GrpcStatusError(GRPC_INTERNAL, e.message, details);
}
