import { stopCluster } from '../../kube/src/testing/cluster';
import { TEST_CLUSTER_ENV } from '../../kube/src/testing/kit';

export default async function globalTeardown(): Promise<void> {
  const dir = process.env[TEST_CLUSTER_ENV];
  if (dir && !process.env.CNIKIT_KEEP_CLUSTER) await stopCluster(dir);
}
