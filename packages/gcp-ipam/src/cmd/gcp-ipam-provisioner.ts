/**
 * gcp-ipam-provisioner: reserve the internal range, add the subnet's secondary range, install the CRDs, create
 * the IPPool (idempotent); `status` refreshes an IPPool's capacity/allocated/available.
 *   gcp-ipam-provisioner --project p --region europe-west1 --subnet default [--range-name live] [--prefix 16]
 *     [--kubeconfig f] [--compute-endpoint URL --network-connectivity-endpoint URL] [--auth none|metadata]
 *     [--metadata-endpoint URL]
 * A flag given as the empty string is the same as one not given: a manifest passes its ConfigMap's keys as they are.
 *   gcp-ipam-provisioner status --pool ippool-default [--kubeconfig f]
 */
import { parseArgs } from 'node:util';
import { GceClient, metadataToken } from '../gce';
import { kubeFromFile, kubeInCluster } from '@cnikit/kube/lite';
import { getPool, refreshPoolStatus } from '../allocator';
import { provision } from '../provisioner';

async function main(): Promise<void> {
  const { values: given, positionals } = parseArgs({
    allowPositionals: true,
    options: {
      project: { type: 'string' },
      region: { type: 'string' },
      subnet: { type: 'string' },
      'range-name': { type: 'string', default: 'live' },
      prefix: { type: 'string', default: '16' },
      target: { type: 'string', default: '10.0.0.0/8' },
      pool: { type: 'string' },
      kubeconfig: { type: 'string' },
      'compute-endpoint': { type: 'string' },
      'network-connectivity-endpoint': { type: 'string' },
      auth: { type: 'string' },
      'metadata-endpoint': { type: 'string' },
      'no-crds': { type: 'boolean', default: false },
    },
  });
  const values = Object.fromEntries(Object.entries(given).filter(([, v]) => v !== '')) as typeof given;
  const kube = values.kubeconfig ? kubeFromFile(values.kubeconfig) : kubeInCluster();
  try {
    if (positionals[0] === 'status') {
      if (!values.pool) throw new Error('--pool is required');
      const p = await refreshPoolStatus(kube, await getPool(kube, values.pool));
      process.stdout.write(`${JSON.stringify(p.status)}\n`);
      return;
    }
    for (const k of ['project', 'region', 'subnet'] as const) if (!values[k]) throw new Error(`--${k} is required`);
    const auth = values.auth ?? (values['compute-endpoint'] ? 'none' : 'metadata');
    const gce = new GceClient({
      project: values.project!,
      endpoint: values['compute-endpoint'],
      networkConnectivityEndpoint: values['network-connectivity-endpoint'],
      token: auth === 'metadata' ? metadataToken(values['metadata-endpoint']) : undefined,
    });
    try {
      const report = await provision({
        gce,
        kube,
        region: values.region!,
        subnet: values.subnet!,
        rangeName: values['range-name'],
        prefixLength: Number(values.prefix),
        targetCidrRange: values.target,
        poolName: values.pool,
        installCrds: !values['no-crds'],
        log: (m) => process.stderr.write(`${m}\n`),
      });
      process.stdout.write(`${JSON.stringify(report)}\n`);
    } finally {
      gce.close();
    }
  } finally {
    kube.close();
  }
}

main().catch((err: Error) => {
  process.stderr.write(`gcp-ipam-provisioner: ${err.message}\n`);
  process.exitCode = 1;
});
