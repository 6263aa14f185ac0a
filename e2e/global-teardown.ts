/** Once per e2e run: remove this run's containers, storage and any namespace a failed test left. */
import { reapNamespaces, runId } from './lib/netns';
import { destroyRunDir } from './lib/podman';

export default async function globalTeardown(): Promise<void> {
  const dir = process.env.CNIKIT_E2E_RUN_DIR;
  if (dir) await destroyRunDir(dir);
  const left = await reapNamespaces(runId());
  if (left.length) console.log(`\n[e2e] removed namespaces the tests left behind: ${left.join(' ')}`);
}
