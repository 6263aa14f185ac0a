// The cloud emulators' programs (`npm run gce-emulator|aliyun-emulator`, tools/emulators/run.mjs) started for
// the lab: each prints where it listens on its first line of stdout. Erasable TypeScript (Node's type stripping
// runs pod-bench.ts, which starts one).
import { spawn } from 'node:child_process';
import * as path from 'node:path';

export interface Emulator {
  /** The program's first line: a URL (gce-emulator) or `host:port` (aliyun-emulator, terway's ecsEndpoint). */
  url: string;
  stop(): Promise<void>;
}

/** Starts `tools/emulators/run.mjs <name> ...args`; resolves once it says where it listens. */
export function startEmulator(root: string, name: string, args: string[]): Promise<Emulator> {
  const child = spawn(process.execPath, [path.join(root, 'tools', 'emulators', 'run.mjs'), name, ...args], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  return new Promise((resolve, reject) => {
    let out = '';
    child.stdout.on('data', (d: Buffer) => {
      out += d.toString();
      if (out.includes('\n'))
        resolve({
          url: out.slice(0, out.indexOf('\n')).trim(),
          stop: async () => {
            child.kill('SIGTERM');
            await exited;
          },
        });
    });
    child.once('exit', (code) => reject(new Error(`${name} exited ${code} before printing its address`)));
  });
}
