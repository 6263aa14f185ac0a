import { calculateExcessIPs, calculateNeededIPs, planAllocation } from '../src/prealloc';
import { LimitsTable, maxUsableIps } from '../src/limits';
import { selectSubnet } from '../src/subnets';
import { delays } from '@cnikit/netlib/retry';
import { Ec2QueryError } from '../src/ec2-query';
import { TokenBucket, ec2Backoff, isRetryable, isThrottle } from '../src/rate-limit';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { loadAll } from 'js-yaml';
import { toYaml } from '@cnikit/kube';
import { ciliumNodeCrd } from '../src/crd';
import { normalizeMac, prefixIps } from '../src/node-sync';

describe('calculateNeededIPs (Cilium pkg/ipam/node.go table)', () => {
  test.each([
    // available, used, pre, min, max, expected
    [0, 0, 8, 0, 0, 8],
    [8, 0, 8, 0, 0, 0],
    [8, 4, 8, 0, 0, 4],
    [16, 16, 8, 0, 0, 8],
    [0, 0, 8, 16, 0, 16], // min-allocate dominates on a fresh node
    [10, 0, 8, 16, 0, 6],
    [20, 18, 8, 16, 0, 6], // then pre-allocate takes over
    [0, 0, 8, 0, 4, 4], // max-allocate caps
    [10, 10, 8, 0, 10, 0], // at max-allocate: nothing
    [12, 0, 8, 0, 10, 0], // above max: floor 0
  ])('available=%i used=%i pre=%i min=%i max=%i -> %i', (a, u, p, mn, mx, want) => {
    expect(calculateNeededIPs(a, u, p, mn, mx)).toBe(want);
  });
});

describe('calculateExcessIPs', () => {
  test.each([
    [16, 0, 8, 0, 0, 8],
    [16, 8, 8, 0, 0, 0],
    [20, 2, 8, 0, 4, 6],
    [10, 2, 8, 10, 0, 0], // within min-allocate: keep
    [12, 2, 8, 10, 2, 0], // within min + max-above-watermark: keep
    [30, 12, 8, 10, 2, 8],
    [5, 0, 8, 0, 0, 0],
  ])('available=%i used=%i pre=%i min=%i maw=%i -> %i', (a, u, p, mn, maw, want) => {
    expect(calculateExcessIPs(a, u, p, mn, maw)).toBe(want);
  });
});

describe('planAllocation', () => {
  const p = { preAllocate: 8, minAllocate: 0, maxAllocate: 0, maxAboveWatermark: 0 };
  test('fresh node wants pre-allocate', () => {
    expect(planAllocation(p, 0, 0)).toEqual({ needed: 8, surge: 0, excess: 0, toAllocate: 8 });
  });
  test('surge: pending pods are added even when the watermark holds (cilium#32713)', () => {
    const r = planAllocation(p, 8, 0, 30);
    expect(r.needed).toBe(0);
    expect(r.surge).toBe(30);
    expect(r.toAllocate).toBe(30);
  });
  test('surge on a fresh node: 30 pods + 8 buffer in one round', () => {
    expect(planAllocation(p, 0, 0, 30).toAllocate).toBe(38);
  });
  test('surge is not re-added for pods already covered', () => {
    expect(planAllocation(p, 38, 0, 30).toAllocate).toBe(0);
  });
  test('max-above-watermark is added to an allocation', () => {
    expect(planAllocation({ ...p, maxAboveWatermark: 4 }, 0, 0).toAllocate).toBe(12);
  });
  test('max-allocate caps surge too', () => {
    expect(planAllocation({ ...p, maxAllocate: 20 }, 0, 0, 30).toAllocate).toBe(20);
  });
  test('excess only when nothing is needed', () => {
    expect(planAllocation(p, 20, 2).excess).toBe(10);
    expect(planAllocation(p, 20, 2, 12).excess).toBe(0);
  });
});

describe('limits', () => {
  test('m5.large: (3 - 0) * (10 - 1) = 27; first-interface-index 1: 18', () => {
    const l = new LimitsTable().get('m5.large')!;
    expect(maxUsableIps(l)).toBe(27);
    expect(maxUsableIps(l, 1)).toBe(18);
  });
  test('override flag', () => {
    const t = LimitsTable.parse('{"x9.huge":{"adapters":2,"ipv4":5},"m5.large":{"adapters":1,"ipv4":3}}');
    expect(maxUsableIps(t.get('x9.huge')!)).toBe(8);
    expect(t.get('m5.large')!.adapters).toBe(1);
    expect(() => LimitsTable.parse('{"a":{"adapters":0,"ipv4":1}}')).toThrow(/adapters and ipv4/);
    expect(() => LimitsTable.parse('nope')).toThrow(/--instance-limits/);
  });
});

describe('selectSubnet', () => {
  const s = (id: string, free: number, tags: Record<string, string> = {}, az = 'a') => ({
    id,
    cidr: '10.0.0.0/24',
    vpcId: 'v',
    availabilityZone: az,
    availableAddresses: free,
    tags,
  });
  const all = [
    s('s1', 10),
    s('s2', 50, { pods: 'x' }),
    s('s3', 30, { pods: 'x', t: '1' }),
    s('s4', 500, {}, 'b'),
    s('s5', 0, { pods: 'x' }),
  ];
  test('ids first, then tags, then node subnet, then most free; VPC+AZ always', () => {
    expect(selectSubnet(all, { 'vpc-id': 'v', 'availability-zone': 'a', 'subnet-ids': ['s1', 's4'] })?.id).toBe('s1');
    expect(selectSubnet(all, { 'vpc-id': 'v', 'availability-zone': 'a', 'subnet-tags': { pods: 'x' } })?.id).toBe('s2');
    expect(selectSubnet(all, { 'vpc-id': 'v', 'availability-zone': 'a', 'subnet-tags': { pods: 'x', t: '1' } })?.id).toBe('s3');
    expect(selectSubnet(all, { 'vpc-id': 'v', 'availability-zone': 'a', 'node-subnet-id': 's1' })?.id).toBe('s1');
    expect(selectSubnet(all, { 'vpc-id': 'v', 'availability-zone': 'a' })?.id).toBe('s2');
    expect(selectSubnet(all, { 'vpc-id': 'v', 'availability-zone': 'a', 'subnet-ids': ['s5'] })).toBeUndefined();
  });
});

describe('rate limiting and retry policy', () => {
  test('token bucket: burst at once, then qps', async () => {
    const b = new TokenBucket(50, 5);
    const t0 = performance.now();
    for (let i = 0; i < 5; i++) await b.take();
    expect(b.waitedMs).toBe(0);
    for (let i = 0; i < 5; i++) await b.take(); // 5 more at 50 QPS: ~100 ms
    expect(performance.now() - t0).toBeGreaterThanOrEqual(80);
    expect(b.waitedMs).toBeGreaterThan(0);
  });
  test('throttling and 5xx are retried, client errors are not', () => {
    expect(isThrottle({ name: 'RequestLimitExceeded' })).toBe(true);
    expect(isRetryable({ name: 'RequestLimitExceeded' })).toBe(true);
    expect(isRetryable({ name: 'InternalError' })).toBe(true);
    expect(isRetryable(new Ec2QueryError('Weird', 'what', 503))).toBe(true);
    expect(isRetryable(new Ec2QueryError('InvalidParameterValue', 'bad', 400))).toBe(false);
    // equal jitter: each delay between half the doubled delay and all of it, capped at maxMs
    const p = { attempts: 12, initialMs: 100, maxMs: 1000 };
    expect([...delays(ec2Backoff(p), () => 0)]).toEqual([50, 100, 200, 400, 500, 500, 500, 500, 500, 500, 500]);
    expect([...delays(ec2Backoff(p), () => 1)].at(-1)).toBe(1000);
  });
});

test('CRD: cilium.io/v2 CiliumNode, cluster-scoped, status subresource, Cilium JSON names', () => {
  const crd = ciliumNodeCrd();
  expect(crd.metadata.name).toBe('ciliumnodes.cilium.io');
  expect(crd.spec.scope).toBe('Cluster');
  const v = crd.spec.versions[0];
  expect(v.name).toBe('v2');
  expect(v.subresources?.status).toEqual({});
  const spec = v.schema!.openAPIV3Schema.properties!.spec.properties!;
  expect(Object.keys(spec.ipam.properties!)).toEqual(['pool', 'min-allocate', 'max-allocate', 'pre-allocate', 'max-above-watermark']);
  expect(Object.keys(spec.eni.properties!)).toEqual(
    expect.arrayContaining([
      'first-interface-index',
      'subnet-tags',
      'security-group-tags',
      'exclude-interface-tags',
      'delete-on-termination',
    ]),
  );
  expect(v.schema!.openAPIV3Schema.properties!.status.properties!.ipam.properties!['release-ips'].additionalProperties).toEqual({
    type: 'string',
    enum: ['marked-for-release', 'ready-for-release', 'do-not-release', 'released'],
  });
});

test('config/: crds.yaml is the dump of src/crd.ts; every manifest document parses and names its kind', () => {
  const dir = path.join(__dirname, '..', 'config');
  expect(fs.readFileSync(path.join(dir, 'crds.yaml'), 'utf8')).toBe(toYaml([ciliumNodeCrd()]));
  for (const f of ['crds.yaml', 'rbac.yaml', 'deploy.yaml']) {
    const docs = loadAll(fs.readFileSync(path.join(dir, f), 'utf8')) as { kind?: string }[];
    expect(docs.length).toBeGreaterThan(0);
    for (const d of docs) expect(typeof d.kind).toBe('string');
  }
});

test('helpers: MAC normalisation, prefix expansion', () => {
  expect(normalizeMac('0A:1B:2C:3D:4E:5F', 'eni-1')).toBe('0a:1b:2c:3d:4e:5f');
  expect(normalizeMac('02:00:00:6702x:1:2', 'eni-213cd8b6f3724614a')).toMatch(/^02(:[0-9a-f]{2}){5}$/);
  expect(prefixIps('10.0.16.16/28')).toHaveLength(16);
});
