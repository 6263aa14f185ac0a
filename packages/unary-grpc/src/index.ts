/**
 * unary-grpc: the gRPC client of the per-pod CNI binaries (coil, terway), one unary call per connection
 * over hand-framed HTTP/2 on a UNIX socket, and the protobuf wire primitives their message codecs are made
 * of. Loading @grpc/grpc-js costs more start-up than a whole ADD should (docs/build.md has the figures);
 * the daemons' side is @cnikit/unary-grpc/server (server.ts, on node:http2), kept out of this entry point so
 * a per-pod binary never loads node:http2. coild, terwayd and terway's kubelet device plugins (whose
 * ListAndWatch is a server-streaming method) serve with it.
 */
export { GrpcConnectError, GrpcError, GrpcStatus, frameMessage, unaryCall } from './unary';
export { ProtoWriter, protoBool, protoBytes, protoFields, protoNumber, protoString, type ProtoField } from './protobuf';
