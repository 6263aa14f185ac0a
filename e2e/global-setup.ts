/**
 * Once per e2e run: an id for the run (namespace names, temp dirs), removal of what crashed
 * earlier runs left behind (namespaces `cke<id>-*` and /tmp/cnikit-e2e-<id> whose process is gone),
 * and the checks whose failure would otherwise show up as dozens of confusing test failures.
 */
import { readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { run } from './lib/exec';
import { reapNamespaces, runId } from './lib/netns';
import { destroyRunDir, runDir } from './lib/podman';
import { cnitoolPath } from './lib/paths';

export default async function globalSetup(): Promise<void> {
  if (process.getuid?.() !== 0) throw new Error('the e2e tests need root (network namespaces, podman)');
  process.env.CNIKIT_E2E_RUN_ID = process.pid.toString(36);
  const stale = await reapNamespaces();
  for (const d of readdirSync(tmpdir()).filter((d) => /^cnikit-e2e-[0-9a-z]+$/.test(d))) {
    const pid = parseInt(d.slice('cnikit-e2e-'.length), 36);
    let alive = false;
    try {
      process.kill(pid, 0);
      alive = true;
    } catch {
      /* gone */
    }
    if (!alive) await destroyRunDir(join(tmpdir(), d));
  }
  if (stale.length) console.log(`\n[e2e] removed namespaces left by an earlier run: ${stale.join(' ')}`);
  runDir();
  cnitoolPath(); // throws with a hint when cnitool is not installed
  for (const tool of ['podman', 'nsenter', 'flock', 'nft']) {
    if ((await run(['sh', '-c', `command -v ${tool}`])).code !== 0) throw new Error(`${tool} not found: run bash tools/ci/setup.sh`);
  }
  runId();
}
