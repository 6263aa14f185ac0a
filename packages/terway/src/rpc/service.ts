/**
 * rpc.TerwayBackend for terwayd's @grpc/grpc-js server: proto.ts's descriptor through proto-loader
 * (keepCase, enums as names, 64-bit integers as numbers, defaults filled in). The terway binary does not
 * load this module: its client is @cnikit/unary-grpc with codec.ts.
 */
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { TERWAY_DESCRIPTOR } from './proto';

let cached: grpc.ServiceDefinition | undefined;

/** The service definition for grpc-js servers and clients. */
export function terwayService(): grpc.ServiceDefinition {
  if (!cached) {
    const def = protoLoader.fromJSON(TERWAY_DESCRIPTOR as unknown as Parameters<typeof protoLoader.fromJSON>[0], {
      keepCase: true,
      longs: Number,
      enums: String,
      defaults: true,
      oneofs: true,
    });
    const pkg = grpc.loadPackageDefinition(def) as unknown as { rpc: { TerwayBackend: grpc.ServiceClientConstructor } };
    cached = pkg.rpc.TerwayBackend.service;
  }
  return cached;
}
