import { stopCluster } from '@cnikit/kube-testing';
import { TEST_CLUSTER_ENV } from '@cnikit/kube-testing';

export default async function globalTeardown(): Promise<void> {
  const dir = process.env[TEST_CLUSTER_ENV];
  // CNIKIT_KEEP_CLUSTER=1 leaves the processes and logs for a post-mortem (stop with npm run cluster -- down --dir <dir>).
  if (dir && !process.env.CNIKIT_KEEP_CLUSTER) await stopCluster(dir);
}
