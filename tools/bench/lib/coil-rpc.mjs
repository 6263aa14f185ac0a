// One STATUS call to coild, for comparing the start-up + call cost of the two client stacks:
//   node coil-rpc.mjs http2  <socket>   raw gRPC over node:http2 (what the `coil` binary does)
//   node coil-rpc.mjs grpcjs <socket>   @grpc/grpc-js generic client
// An empty CNIArgs is an empty protobuf message; the Status verb needs no fields.
const [mode, socket] = process.argv.slice(2);
const path = '/pkg.cnirpc.CNI/Status';

if (mode === 'http2') {
  const http2 = await import('node:http2');
  const net = await import('node:net');
  const session = http2.connect('http://localhost', { createConnection: () => net.connect(socket) });
  const req = session.request({ ':method': 'POST', ':path': path, 'content-type': 'application/grpc', te: 'trailers' });
  let status = '';
  req.on('trailers', (t) => {
    status = String(t['grpc-status']);
  });
  req.on('response', (h) => {
    if (h['grpc-status'] !== undefined) status = String(h['grpc-status']);
  });
  req.on('data', () => {});
  req.on('end', () => {
    session.close();
    process.exitCode = status === '0' ? 0 : 1;
  });
  req.end(Buffer.alloc(5));
} else if (mode === 'grpcjs') {
  const grpc = (await import('@grpc/grpc-js')).default;
  const id = (b) => b;
  const Client = grpc.makeGenericClientConstructor(
    {
      Status: {
        path,
        requestStream: false,
        responseStream: false,
        requestSerialize: id,
        requestDeserialize: id,
        responseSerialize: id,
        responseDeserialize: id,
      },
    },
    'CNI',
  );
  const client = new Client(`unix:${socket}`, grpc.credentials.createInsecure());
  client.Status(Buffer.alloc(0), (err) => {
    client.close();
    process.exitCode = err ? 1 : 0;
  });
} else {
  console.error('usage: coil-rpc.mjs http2|grpcjs <socket>');
  process.exit(2);
}
