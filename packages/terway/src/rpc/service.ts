/**
 * rpc.TerwayBackend for terwayd's @grpc/grpc-js server: proto.ts's descriptor through proto-loader
 * (keepCase, enums as names, 64-bit integers as numbers, defaults filled in). The terway binary does not
 * load this module: its client is @cnikit/unary-grpc with codec.ts.
 */
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { TERWAY_DESCRIPTOR } from './proto';

/**
 * A protobuf JSON descriptor loaded for grpc-js the way terwayd's servers read messages: field names as
 * declared, enums as their names, 64-bit integers as numbers, absent fields at their defaults.
 */
export function loadGrpcPackage<T>(descriptor: object, options: protoLoader.Options = {}): T {
  const def = protoLoader.fromJSON(descriptor as Parameters<typeof protoLoader.fromJSON>[0], {
    keepCase: true,
    longs: Number,
    enums: String,
    defaults: true,
    ...options,
  });
  return grpc.loadPackageDefinition(def) as unknown as T;
}

type TerwayPackage = { rpc: { TerwayBackend: grpc.ServiceClientConstructor } };
let cached: grpc.ServiceDefinition | undefined;

/** The service definition for grpc-js servers and clients. */
export function terwayService(): grpc.ServiceDefinition {
  cached ??= loadGrpcPackage<TerwayPackage>(TERWAY_DESCRIPTOR, { oneofs: true }).rpc.TerwayBackend.service;
  return cached;
}
