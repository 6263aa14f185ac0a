/**
 * The tests' @grpc/grpc-js definitions of the services terwayd serves and calls, loaded by proto-loader from
 * the same descriptors (rpc/proto.ts, deviceplugin/proto.ts) the hand-written codecs follow: the reference
 * the codecs and servers are checked against. Test-only; nothing shipped loads grpc-js or proto-loader.
 */
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { DEVICE_PLUGIN_DESCRIPTOR } from '../src/deviceplugin/proto';
import { TERWAY_DESCRIPTOR } from '../src/rpc/proto';

/** A protobuf JSON descriptor the way terwayd's grpc-js servers read messages: keepCase, enums as names, longs as numbers, defaults. */
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

/** rpc.TerwayBackend for grpc-js clients and servers. */
export function terwayService(): grpc.ServiceDefinition {
  cached ??= loadGrpcPackage<TerwayPackage>(TERWAY_DESCRIPTOR, { oneofs: true }).rpc.TerwayBackend.service;
  return cached;
}

type DeviceApi = { Registration: grpc.ServiceClientConstructor; DevicePlugin: grpc.ServiceClientConstructor };
let cachedDevice: DeviceApi | undefined;

/** v1beta1.Registration and v1beta1.DevicePlugin's constructors (service definitions at `.service`). */
export function deviceApi(): DeviceApi {
  cachedDevice ??= loadGrpcPackage<{ v1beta1: DeviceApi }>(DEVICE_PLUGIN_DESCRIPTOR).v1beta1;
  return cachedDevice;
}
