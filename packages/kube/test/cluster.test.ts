// The `npm run cluster` command line: up prints KUBECONFIG=<path> and leaves a working cluster behind,
// kubectl works against it, status reports it, down stops it and removes its state.
import { execFile } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { promisify } from 'node:util';
import { isAlive, readState } from '@cnikit/kube-testing';

const run = promisify(execFile);
const root = path.join(__dirname, '../../..');
const cli = path.join(root, 'tools/cluster/cluster.mjs');

test('cluster up / status / down, with kubectl in between', async () => {
  const dir = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'cnikit-cli-')), 'state');
  const t0 = Date.now();
  const up = await run(process.execPath, [cli, 'up', '--no-gc', '--dir', dir], { cwd: root });
  const upMs = Date.now() - t0;
  try {
    const m = /^KUBECONFIG=(.+)$/m.exec(up.stdout);
    expect(m).not.toBeNull();
    const kubeconfig = m![1]!;
    expect(kubeconfig).toBe(path.join(dir, 'kubeconfig'));
    process.stderr.write(`cluster CLI: up (cached binaries, no GC) took ${upMs} ms\n`);

    const env = { ...process.env, KUBECONFIG: kubeconfig };
    const ns = await run('kubectl', ['get', 'namespace', 'default', '-o', 'jsonpath={.status.phase}'], { env });
    expect(ns.stdout).toBe('Active');
    const created = await run('kubectl', ['create', 'configmap', 'hello', '--from-literal=a=b'], { env });
    expect(created.stdout).toContain('configmap/hello created');

    const status = await run(process.execPath, [cli, 'status', '--dir', dir], { cwd: root });
    expect(status.stdout).toMatch(/^ready https:\/\/127\.0\.0\.1:\d+ etcd=\d+ apiserver=\d+$/m);

    // A second `up` finds the running cluster and prints the same kubeconfig.
    const again = await run(process.execPath, [cli, 'up', '--dir', dir], { cwd: root });
    expect(again.stdout.trim()).toBe(`KUBECONFIG=${kubeconfig}`);
  } finally {
    const state = readState(dir);
    await run(process.execPath, [cli, 'down', '--dir', dir], { cwd: root });
    expect(fs.existsSync(dir)).toBe(false);
    for (const pid of Object.values(state?.pids ?? {})) expect(isAlive(pid as number)).toBe(false);
  }
  await expect(run(process.execPath, [cli, 'status', '--dir', dir], { cwd: root })).rejects.toMatchObject({ code: 1 });
  fs.rmSync(path.dirname(dir), { recursive: true, force: true });
}, 90_000);
