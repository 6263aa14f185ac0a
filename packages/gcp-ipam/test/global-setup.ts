// One real control plane (etcd + kube-apiserver) for every gcp-ipam test file; its state dir goes to the test
// files through CNIKIT_TEST_CLUSTER. The binaries are built (once, cached) by tools/cluster/build.sh.
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { startCluster } from '@cnikit/kube-testing';
import { TEST_CLUSTER_ENV } from '@cnikit/kube-testing';

export default async function globalSetup(): Promise<void> {
  const stateDir = fs.mkdtempSync(path.join(os.tmpdir(), 'cnikit-gcp-ipam-test-'));
  const info = await startCluster({
    stateDir,
    buildScript: path.join(__dirname, '../../../tools/cluster/build.sh'),
    garbageCollector: false,
    log: (m) => process.stderr.write(`${m}\n`),
  });
  process.env[TEST_CLUSTER_ENV] = info.stateDir;
  process.stderr.write(`gcp-ipam tests: cluster ${info.server} up in ${info.startupMs} ms\n`);
}
