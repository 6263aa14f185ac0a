// The per-pod binaries' gRPC client: start-up + one unary call, whole process, for each client stack,
// against one @grpc/grpc-js server on a UNIX socket (a daemon's side). Each subject is an esbuild bundle
// (as the executables are built) run by the pinned Node; round-robin, medians. Printed, never asserted.
//
//   node tools/bench/bench.mjs --only grpc-client [--runs 21]
import { spawn, spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { median, ms, ratio, table, timeOnce } from './lib/measure.mjs';

export const title = 'gRPC client of the per-pod binaries: start-up + one unary call (hand-written HTTP/2 vs @grpc/grpc-js)';
export const order = 38;

// Each entry makes one call on the socket named by argv[2] and exits 0 on an OK status. (close?.(): the
// grpc-js TerwayClient held a channel; the unary-grpc one holds nothing, so the same entry times both.)
const ENTRIES = {
  'terway TerwayClient.getIPInfo': (root) => `
import { TerwayClient } from ${JSON.stringify(path.join(root, 'packages/terway/src/cni/client.ts'))};
const c = new TerwayClient(process.argv[2], 5000);
c.getIPInfo({ K8sPodName: 'p', K8sPodNamespace: 'n', K8sPodInfraContainerId: '', Netns: '', IfName: '' })
  .then(() => c.close?.(), (e) => { console.error(e); process.exit(1); });
`,
  '@cnikit/unary-grpc unaryCall (coil Status)': (root) => `
import { unaryCall } from ${JSON.stringify(path.join(root, 'packages/unary-grpc/src/index.ts'))};
unaryCall(process.argv[2], '/pkg.cnirpc.CNI/Status', Buffer.alloc(0), 5000).catch((e) => { console.error(e); process.exit(1); });
`,
  '@grpc/grpc-js generic client (coil Status)': () => `
import * as grpc from '@grpc/grpc-js';
const id = (b) => b;
const def = { path: '/pkg.cnirpc.CNI/Status', requestStream: false, responseStream: false,
  requestSerialize: id, requestDeserialize: id, responseSerialize: id, responseDeserialize: id };
const Client = grpc.makeGenericClientConstructor({ Status: def }, 'CNI');
const c = new Client('unix:' + process.argv[2], grpc.credentials.createInsecure());
c.Status(Buffer.alloc(0), (e) => { c.close(); if (e) { console.error(e); process.exit(1); } });
`,
};

// Answers both paths with an empty message (every field at its default) from a separate process, so
// the timed children never wait on this one's event loop.
const SERVER = `
const grpc = require('@grpc/grpc-js');
const id = (b) => b;
const method = (p) => ({ path: p, requestStream: false, responseStream: false,
  requestSerialize: id, requestDeserialize: id, responseSerialize: id, responseDeserialize: id });
const s = new grpc.Server();
s.addService({ GetIPInfo: method('/rpc.TerwayBackend/GetIPInfo'), Status: method('/pkg.cnirpc.CNI/Status') },
  { GetIPInfo: (_c, cb) => cb(null, Buffer.alloc(0)), Status: (_c, cb) => cb(null, Buffer.alloc(0)) });
s.bindAsync('unix:' + process.argv[2], grpc.ServerCredentials.createInsecure(), (e) => {
  if (e) throw e;
  process.stdout.write('ready\\n');
});
`;

function bundle(root, dir, name, source) {
  const entry = path.join(dir, `${name}.ts`);
  fs.writeFileSync(entry, source);
  const out = path.join(dir, `${name}.cjs`);
  const esbuild = path.join(root, 'node_modules', '.bin', 'esbuild');
  const args = [entry, '--bundle', '--platform=node', '--target=node22', '--format=cjs', `--outfile=${out}`, '--log-level=error'];
  const r = spawnSync(esbuild, [...args, `--tsconfig=${path.join(root, 'tsconfig.base.json')}`, '--minify'], {
    encoding: 'utf8',
    cwd: root,
    env: { ...process.env, NODE_PATH: path.join(root, 'node_modules') },
  });
  if (r.status !== 0) throw new Error(`esbuild ${name}: ${r.stderr}`);
  return out;
}

async function startServer(ctx, dir, socket) {
  const file = path.join(dir, 'server.cjs');
  fs.writeFileSync(file, SERVER);
  const child = spawn(ctx.node, [file, socket], {
    stdio: ['ignore', 'pipe', 'inherit'],
    env: { NODE_PATH: path.join(ctx.root, 'node_modules') },
  });
  await new Promise((resolve, reject) => {
    child.stdout.once('data', resolve);
    child.once('exit', (code) => reject(new Error(`server exited ${code}`)));
  });
  return child;
}

export async function run(ctx) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cnikit-bench-grpc-'));
  const socket = path.join(dir, 'rpc.sock');
  const server = await startServer(ctx, dir, socket);
  try {
    const subjects = Object.entries(ENTRIES).map(([name, src], i) => {
      const out = bundle(ctx.root, dir, `client${i}`, src(ctx.root));
      return [name, { file: ctx.node, args: [out, socket], env: {} }];
    });
    subjects.push(['node -e 0', { file: ctx.node, args: ['-e', '0'], env: {} }]);
    for (const [, c] of subjects) timeOnce(c);
    const times = subjects.map(() => []);
    for (let i = 0; i < ctx.runs; i++) subjects.forEach(([, c], j) => times[j].push(timeOnce(c)));
    const bare = median(times[subjects.length - 1]);
    console.log(`  start-up + one call, bundles run by ${path.relative(ctx.root, ctx.node)}, medians of ${ctx.runs} round-robin runs:`);
    table(
      ['', 'median', 'ratio to bare'],
      subjects.map(([name], j) => [name, ms(median(times[j])), ratio(median(times[j]) / bare)]),
    );
  } finally {
    server.kill();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}
