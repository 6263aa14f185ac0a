/**
 * jest globalSetup / globalTeardown for a package whose test files share one control plane: started once
 * per run, its state dir handed to the test files through TEST_CLUSTER_ENV (testCluster() reads it).
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { startCluster, stopCluster, type ClusterOptions } from './cluster';
import { TEST_CLUSTER_ENV } from './kit';

/** A globalSetup for the tests of `pkg`, the cluster started with `opts` (the binaries built first if the cache is empty). */
export function clusterGlobalSetup(pkg: string, opts: Pick<ClusterOptions, 'garbageCollector' | 'apiServerArgs'>): () => Promise<void> {
  return async () => {
    const info = await startCluster({
      stateDir: fs.mkdtempSync(path.join(os.tmpdir(), `cnikit-${pkg}-test-`)),
      buildScript: path.join(__dirname, '../../../tools/cluster/build.sh'),
      ...opts,
      log: (m) => process.stderr.write(`${m}\n`),
    });
    process.env[TEST_CLUSTER_ENV] = info.stateDir;
    process.stderr.write(
      `${pkg} tests: cluster ${info.server} (Kubernetes ${info.version}) up in ${info.startupMs} ms, state ${info.stateDir}\n`,
    );
  };
}

/** The globalTeardown matching clusterGlobalSetup. CNIKIT_KEEP_CLUSTER=1 leaves the processes and logs for a
 * post-mortem (stop them with npm run cluster -- down --dir <dir>). */
export async function clusterGlobalTeardown(): Promise<void> {
  const dir = process.env[TEST_CLUSTER_ENV];
  if (dir && !process.env.CNIKIT_KEEP_CLUSTER) await stopCluster(dir);
}
