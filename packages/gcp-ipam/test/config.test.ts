// parseIpamConfig: defaults and table-driven refusals naming the field.
import { parseIpamConfig } from '../src/config';
import type { NetConf } from '@cnikit/netlib';

const base = { type: 'gcp-ipam', pool: 'ippool-default', project: 'test-project', zone: 'europe-west1-b', nodeName: 'node-a' };
const conf = (ipam: Record<string, unknown>): NetConf => ({ cniVersion: '1.1.0', name: 'n', type: 'ptp', ipam: ipam as NetConf['ipam'] });

test('defaults', () => {
  expect(parseIpamConfig(conf(base))).toMatchObject({
    instance: 'node-a',
    networkInterface: 'nic0',
    auth: 'metadata',
    stateDir: '/var/lib/cni/gcp-ipam',
    batchWindowMs: 25,
    routes: [{ dst: '0.0.0.0/0' }],
    rateLimitBackoffMs: 500,
  });
  expect(parseIpamConfig(conf({ ...base, computeEndpoint: 'http://127.0.0.1:1/compute/v1' })).auth).toBe('none');
  expect(parseIpamConfig(conf({ ...base, nodeName: 'node-a.example.internal' })).instance).toBe('node-a');
});

test.each([
  ['pool', undefined],
  ['pool', 'Bad_Name'],
  ['project', 'x'],
  ['zone', 'europe-west1'],
  ['instance', 'UPPER'],
  ['networkInterface', 'eth0'],
  ['auth', 'oauth'],
  ['batchWindowMs', 1.5],
  ['routes', [{ dst: 'nope' }]],
  ['routes', 'x'],
  ['computeEndpoint', 'file:///etc/passwd'],
  ['unknownKey', true],
])('ipam.%s = %j is refused with code 7', (field, value) => {
  const ipam: Record<string, unknown> = { ...base, [field]: value };
  if (value === undefined) delete ipam[field];
  let err: { code?: number; message?: string } = {};
  try {
    parseIpamConfig(conf(ipam));
  } catch (e) {
    err = e as typeof err;
  }
  expect(err.code).toBe(7);
  expect(err.message).toContain(`ipam.${field}`);
});
