// One kube-apiserver + etcd for the test files (packages/kube's globalSetup), and moto installed once up
// front (tools/moto/setup.sh, idempotent, cached under ~/.cache/cnikit/moto) so that no test hook times
// out on a cold cache.
import kubeSetup from '../../kube/test/global-setup';
import { motoServerPath } from '@cnikit/cilium-eni-ipam-testing';

export default async function globalSetup(): Promise<void> {
  const t0 = Date.now();
  process.env.CNIKIT_MOTO_SERVER = motoServerPath();
  process.stderr.write(`cilium-eni-ipam tests: moto_server ${process.env.CNIKIT_MOTO_SERVER} ready in ${Date.now() - t0} ms\n`);
  await kubeSetup();
}
