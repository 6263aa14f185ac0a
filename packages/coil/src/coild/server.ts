/**
 * The gRPC side of coild: service pkg.cnirpc.CNI on a UNIX socket (mode 0600) with @grpc/grpc-js, using the
 * hand-written codec (no proto-loader). A failed verb answers INTERNAL with a google.rpc.Status detail
 * carrying the CNIError (code, msg, details), so the CNI error code survives the boundary. Server metrics
 * are go-grpc-prometheus' (grpc_server_started_total, grpc_server_handled_total, grpc_server_handling_seconds).
 */
import * as fs from 'node:fs';
import * as grpc from '@grpc/grpc-js';
import { CniCode, CniError } from '@cnikit/netlib';
import { MetricsIn } from '@cnikit/kube';
import type { Counter, Histogram, Registry } from '@cnikit/kube/prom';
import {
  SERVICE,
  decodeAddResponse,
  decodeCNIArgs,
  encodeAddResponse,
  encodeCNIArgs,
  encodeStatusWithCNIError,
  type CNIArgs,
} from '../rpc/codec';
import type { Coild } from './coild';

const GRPC_INTERNAL = 13;
const CODE_NAMES: Record<number, string> = { 0: 'OK', 13: 'Internal' };

type Method = 'Add' | 'Del' | 'Check' | 'GC' | 'Status';

function definition(): grpc.ServiceDefinition {
  const def: Record<string, grpc.MethodDefinition<CNIArgs, Buffer>> = {};
  for (const m of ['Add', 'Del', 'Check', 'GC', 'Status'] as Method[]) {
    def[m] = {
      path: `/${SERVICE}/${m}`,
      requestStream: false,
      responseStream: false,
      originalName: m,
      requestSerialize: (a: CNIArgs) => encodeCNIArgs(a),
      requestDeserialize: (b: Buffer) => decodeCNIArgs(b),
      responseSerialize: (b: Buffer) => b,
      responseDeserialize: (b: Buffer) => (m === 'Add' ? decodeAddResponse(b) : b),
    };
  }
  return def as grpc.ServiceDefinition;
}

export interface CoildServerOptions {
  socketPath: string;
  registry?: Registry;
}

export class CoildServer {
  private readonly server = new grpc.Server();
  private readonly started?: Counter<'grpc_type' | 'grpc_service' | 'grpc_method'>;
  private readonly handled?: Counter<'grpc_type' | 'grpc_service' | 'grpc_method' | 'grpc_code'>;
  private readonly seconds?: Histogram<'grpc_type' | 'grpc_service' | 'grpc_method'>;

  constructor(
    coild: Coild,
    private readonly opts: CoildServerOptions,
  ) {
    if (opts.registry) {
      const m = new MetricsIn(opts.registry);
      const labelNames = ['grpc_type', 'grpc_service', 'grpc_method'] as const;
      this.started = m.counter('grpc_server_started_total', 'Total number of RPCs started on the server.', labelNames);
      this.handled = m.counter(
        'grpc_server_handled_total',
        'Total number of RPCs completed on the server, regardless of success or failure.',
        [...labelNames, 'grpc_code'],
      );
      this.seconds = m.histogram(
        'grpc_server_handling_seconds',
        'Histogram of response latency (seconds) of gRPC that had been application-level handled by the server.',
        labelNames,
        [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
      );
    }
    const impl: grpc.UntypedServiceImplementation = {};
    const verbs: Record<Method, (a: CNIArgs) => Promise<Buffer>> = {
      Add: async (a) => encodeAddResponse(JSON.stringify(await coild.add(a))),
      Del: async (a) => (await coild.del(a), Buffer.alloc(0)),
      Check: async (a) => (await coild.check(a), Buffer.alloc(0)),
      GC: async (a) => (await coild.gc(a), Buffer.alloc(0)),
      Status: async () => (await coild.status(), Buffer.alloc(0)),
    };
    for (const m of Object.keys(verbs) as Method[]) {
      impl[m] = (call: grpc.ServerUnaryCall<CNIArgs, Buffer>, cb: grpc.sendUnaryData<Buffer>) => {
        const labels = { grpc_type: 'unary', grpc_service: SERVICE, grpc_method: m };
        this.started?.inc(labels);
        const end = this.seconds?.startTimer(labels);
        verbs[m](call.request).then(
          (res) => {
            end?.();
            this.handled?.inc({ ...labels, grpc_code: CODE_NAMES[0]! });
            cb(null, res);
          },
          (err: unknown) => {
            end?.();
            this.handled?.inc({ ...labels, grpc_code: CODE_NAMES[GRPC_INTERNAL]! });
            cb(toServiceError(err));
          },
        );
      };
    }
    this.server.addService(definition(), impl);
  }

  async listen(): Promise<void> {
    fs.rmSync(this.opts.socketPath, { force: true });
    await new Promise<void>((resolve, reject) => {
      this.server.bindAsync(`unix:${this.opts.socketPath}`, grpc.ServerCredentials.createInsecure(), (err) =>
        err ? reject(err) : resolve(),
      );
    });
    fs.chmodSync(this.opts.socketPath, 0o600);
  }

  async close(): Promise<void> {
    await new Promise<void>((resolve) => this.server.tryShutdown(() => resolve()));
    fs.rmSync(this.opts.socketPath, { force: true });
  }
}

function toServiceError(err: unknown): Partial<grpc.StatusObject> {
  const e = err instanceof CniError ? err : new CniError(CniCode.Internal, (err as Error)?.message ?? String(err));
  const metadata = new grpc.Metadata();
  metadata.set(
    'grpc-status-details-bin',
    encodeStatusWithCNIError(GRPC_INTERNAL, e.message, { code: e.code, msg: e.msg, details: e.details }),
  );
  return { code: GRPC_INTERNAL, details: e.message, metadata };
}
