// Stand-ins for the node daemons the per-pod plugins ask (coild, terwayd, cilium-eni-agent), for the training
// scenarios here and `npm run bench`'s STATUS figures: each is a child process (the callers block in spawnSync)
// on a UNIX socket answering fixed replies, so a plugin's own cost is what gets trained or measured.
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';

// gRPC: every call answered OK with the message of the first path suffix that matches, else an empty one.
const GRPC = `
const http2 = require('node:http2');
const [socket, answers] = process.argv.slice(1);
const replies = Object.entries(JSON.parse(answers)).map(([suffix, b64]) => [suffix, Buffer.from(b64, 'base64')]);
const frame = (msg) => { const h = Buffer.alloc(5); h.writeUInt32BE(msg.length, 1); return Buffer.concat([h, msg]); };
const server = http2.createServer();
server.on('stream', (stream, headers) => {
  stream.on('data', () => {});
  stream.on('end', () => {
    const hit = replies.find(([suffix]) => headers[':path'].endsWith(suffix));
    stream.respond({ ':status': 200, 'content-type': 'application/grpc' }, { waitForTrailers: true });
    stream.on('wantTrailers', () => stream.sendTrailers({ 'grpc-status': '0' }));
    stream.end(frame(hit ? hit[1] : Buffer.alloc(0)));
  });
});
server.listen(socket, () => process.stdout.write('ready\\n'));
`;

// One JSON line in, one JSON reply out, then the connection ends (cilium-eni-agent's protocol).
const JSON_LINE = `
const net = require('node:net');
const [socket, reply] = process.argv.slice(1);
net.createServer((c) => c.once('data', () => c.end(reply + '\\n'))).listen(socket, () => process.stdout.write('ready\\n'));
`;

async function start(program, socket, arg) {
  fs.rmSync(socket, { force: true });
  const child = spawn(process.execPath, ['-e', program, socket, arg], { stdio: ['ignore', 'pipe', 'inherit'] });
  await new Promise((resolve, reject) => {
    child.stdout.once('data', resolve);
    child.once('exit', (code) => reject(new Error(`stand-in on ${socket} exited ${code}`)));
  });
  return {
    stop() {
      child.kill();
      fs.rmSync(socket, { force: true });
    },
  };
}

/** A gRPC daemon; `answers` maps a path suffix ('/Add') to the response message's bytes. */
export const grpcStandIn = (socket, answers = {}) =>
  start(GRPC, socket, JSON.stringify(Object.fromEntries(Object.entries(answers).map(([k, v]) => [k, Buffer.from(v).toString('base64')]))));

/** A daemon speaking one JSON line each way; `reply` is what it answers to anything. */
export const jsonLineStandIn = (socket, reply) => start(JSON_LINE, socket, JSON.stringify(reply));
