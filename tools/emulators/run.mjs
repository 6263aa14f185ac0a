#!/usr/bin/env node
// npm run gce-emulator|aliyun-emulator -- [flags]: the cloud emulators' programs
// (testing/<name>/src/cmd/<name>.ts), bundled by esbuild from the workspace's TypeScript sources (the paths of
// tsconfig.base.json, as the kernel lab bundles its scenarios) and run with this Node. The bundle is written
// beside node_modules' cache for this run only and removed when the program exits.
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const [name, ...args] = process.argv.slice(2);
const program = join(root, 'testing', name ?? '', 'src', 'cmd', `${name}.ts`);
if (!name || !existsSync(program)) {
  console.error(`usage: node tools/emulators/run.mjs <emulator> [flags] (no ${program})`);
  process.exit(2);
}
const dir = join(root, 'node_modules', '.cache', 'cnikit-emulators');
mkdirSync(dir, { recursive: true });
const out = join(dir, `${name}.${process.pid}.cjs`);
await build({
  absWorkingDir: root,
  entryPoints: [program],
  outfile: out,
  bundle: true,
  platform: 'node',
  target: 'node20',
  format: 'cjs',
  tsconfig: join(root, 'tsconfig.base.json'),
  external: ['netlink', 'netlink/*'],
  logLevel: 'error',
});
const child = spawn(process.execPath, [out, ...args], { stdio: 'inherit' });
// a stop of this launcher is the emulator's stop: no orphan keeps the port (or a caller's pipe) open
for (const sig of ['SIGTERM', 'SIGINT']) process.on(sig, () => child.kill(sig));
child.on('exit', (code, signal) => {
  rmSync(out, { force: true });
  process.exit(code ?? (signal ? 1 : 0));
});
