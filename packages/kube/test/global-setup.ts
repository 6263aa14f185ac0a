// Starts one real control plane (etcd + kube-apiserver + the garbage collector) for all kube test files and
// hands its state dir to them through CNIKIT_TEST_CLUSTER. Builds the binaries first if the cache is empty.
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { startCluster } from '@cnikit/kube-testing';
import { TEST_CLUSTER_ENV } from '@cnikit/kube-testing';

export default async function globalSetup(): Promise<void> {
  const stateDir = fs.mkdtempSync(path.join(os.tmpdir(), 'cnikit-kube-test-'));
  const info = await startCluster({
    stateDir,
    buildScript: path.join(__dirname, '../../../tools/cluster/build.sh'),
    garbageCollector: true,
    // ConfigMaps bypass the watch cache, so a watch from a compacted resourceVersion gets a real 410 Gone
    // from etcd (the informer re-list test); other resources keep the cache (bookmarks come from it).
    apiServerArgs: ['--watch-cache-sizes=configmaps#0'],
    log: (m) => process.stderr.write(`${m}\n`),
  });
  process.env[TEST_CLUSTER_ENV] = info.stateDir;
  process.stderr.write(
    `kube tests: cluster ${info.server} (Kubernetes ${info.version}) up in ${info.startupMs} ms, state ${info.stateDir}\n`,
  );
}
