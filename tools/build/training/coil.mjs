// Training scenario of `coil` (tools/build/lib/train.mjs): ADD, CHECK, STATUS and DEL against a stand-in for
// coild, so the thin client's HTTP/2 and gRPC code is in the cache. The stand-in is a node:http2
// server on a UNIX socket in a child process (the training calls block this one) that answers
// Add with a fixed result and every other method with an empty message. Needs no root.
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';

export const needsKernel = false;

const SERVER = `
const http2 = require('node:http2');
const [socket, result] = process.argv.slice(1);
const frame = (msg) => { const h = Buffer.alloc(5); h.writeUInt32BE(msg.length, 1); return Buffer.concat([h, msg]); };
// AddResponse { bytes result = 1 }: tag 0x0a, varint length, bytes
const varint = (n) => { const b = []; while (n > 127) { b.push((n & 127) | 128); n >>>= 7; } b.push(n); return Buffer.from(b); };
const add = Buffer.concat([Buffer.from([0x0a]), varint(Buffer.byteLength(result)), Buffer.from(result)]);
const server = http2.createServer();
server.on('stream', (stream, headers) => {
  stream.on('data', () => {});
  stream.on('end', () => {
    stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
    stream.on('wantTrailers', () => stream.sendTrailers({ 'grpc-status': '0' }));
    stream.end(frame(headers[':path'].endsWith('/Add') ? add : Buffer.alloc(0)));
  });
});
server.listen(socket, () => process.stdout.write('ready\\n'));
`;

export async function train(t) {
  const socket = path.join(t.work, 'coild.sock');
  const result = JSON.stringify({
    cniVersion: '1.0.0',
    interfaces: [{ name: 'eth0', mac: '0a:58:0a:8c:00:05', sandbox: '/var/run/netns/train' }],
    ips: [{ address: '10.140.0.5/32', gateway: '10.140.0.1', interface: 0 }],
    routes: [{ dst: '0.0.0.0/0', gw: '10.140.0.1' }],
  });
  const server = spawn(process.execPath, ['-e', SERVER, socket, result], { stdio: ['ignore', 'pipe', 'inherit'] });
  try {
    await new Promise((resolve, reject) => {
      server.stdout.once('data', resolve);
      server.once('exit', (code) => reject(new Error(`stand-in coild exited ${code}`)));
    });
    const conf = JSON.stringify({ cniVersion: '1.0.0', name: 'k8s-pod-network', type: 'coil', socket });
    const env = (command) => ({
      CNI_COMMAND: command,
      CNI_CONTAINERID: `${t.id}0123456789`,
      CNI_NETNS: '/var/run/netns/train',
      CNI_IFNAME: 'eth0',
      CNI_PATH: '/nonexistent',
      CNI_ARGS: 'IgnoreUnknown=1;K8S_POD_NAME=p;K8S_POD_NAMESPACE=default',
      PATH: '/nonexistent',
    });
    t.call(env('ADD'), conf);
    t.call(env('CHECK'), conf);
    // containerd 2.x asks every plugin of a 1.1.0 conflist for STATUS on each runtime status poll.
    t.call(env('STATUS'), JSON.stringify({ ...JSON.parse(conf), cniVersion: '1.1.0' }));
    t.call(env('DEL'), conf);
  } finally {
    server.kill();
    fs.rmSync(socket, { force: true });
  }
}
