// The provisioner against the fake GCE and the real API server: internal range, subnet secondary range, CRDs
// and IPPool; idempotent; a stale subnet fingerprint is re-read.
import * as fs from 'node:fs';
import * as path from 'node:path';
import { dump } from 'js-yaml';
import { GceClient } from '../src/gce';
import { kubeFromFile } from '@cnikit/kube/lite';
import { provision } from '../src/provisioner';
import { crds } from '../src/crds';
import { API_VERSION, type IPPool } from '../src/types';
import { kubeconfig, newFake, uniqueName } from './support';

test('provision: reserves a /16 in 10/8, adds secondary range "live", creates the IPPool; a second run changes nothing', async () => {
  const fake = await newFake();
  const kube = kubeFromFile(kubeconfig);
  const gce = new GceClient({
    project: fake.project,
    endpoint: fake.computeEndpoint,
    networkConnectivityEndpoint: fake.networkConnectivityEndpoint,
  });
  try {
    const subnet = uniqueName('subnet');
    fake.addSubnet('europe-west1', subnet, '10.0.0.0/20');
    fake.inject('subnetworks.patch', { status: 412, reason: 'conditionNotMet' }, 1);
    const r = await provision({ gce, kube, region: 'europe-west1', subnet });
    expect(r).toMatchObject({ createdRange: true, patchedSubnet: true, createdPool: true, pool: `ippool-${subnet}` });
    expect(r.cidr).toMatch(/^10\.\d+\.0\.0\/16$/);
    expect(r.cidr).not.toBe('10.0.0.0/16'); // overlaps the primary range
    const sn = fake.subnets.get(`europe-west1/${subnet}`)!;
    expect(sn.secondaryIpRanges).toEqual([expect.objectContaining({ rangeName: 'live', ipCidrRange: r.cidr })]);
    const pool = await kube.request<IPPool>('GET', `/apis/${API_VERSION}/ippools/ippool-${subnet}`);
    expect(pool.spec).toEqual({
      cidr: r.cidr,
      subnet: `projects/${fake.project}/regions/europe-west1/subnetworks/${subnet}`,
      secondaryRangeName: 'live',
    });
    expect(pool.status).toMatchObject({ capacity: 65533, allocated: 0, available: 65533 });
    const again = await provision({ gce, kube, region: 'europe-west1', subnet });
    expect(again).toMatchObject({ cidr: r.cidr, createdRange: false, patchedSubnet: false, createdPool: false });
    expect(fake.internalRanges.size).toBe(1);
  } finally {
    gce.close();
    kube.close();
    await fake.stop();
  }
});

test('config/crds.yaml is the YAML form of src/crds.ts', () => {
  const file = path.join(__dirname, '../config/crds.yaml');
  const expected = crds.map((c) => dump(c, { noRefs: true, lineWidth: 120 })).join('---\n');
  if (process.env.GCP_IPAM_WRITE_CRDS) fs.writeFileSync(file, expected);
  expect(fs.readFileSync(file, 'utf8')).toBe(expected);
});
