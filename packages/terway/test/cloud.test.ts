/**
 * terway's OpenAPI client (src/cloud/openapi.ts, V3-signed RPC) against the
 * local fake OpenAPI: signatures, async attach states, paging, quotas,
 * Throttling retries, injected failures and latency; then the pool on top.
 */
import type { FakeOpenApi } from '@cnikit/aliyun-emulator';
import { AliyunEniCloud, CloudError, gatewayOf, memberEniQuota } from '../src/cloud';
import { realClock } from '../src/clock';
import { EniIpPool, parsePoolConfig } from '../src/pool';
import { cloudFor, startNodeApi, type CloudOptions } from './support';

jest.setTimeout(30_000);

let api: FakeOpenApi;
let cloud: AliyunEniCloud;

const client = (over: Partial<CloudOptions> = {}): AliyunEniCloud => cloudFor(api, { retryBaseMs: 5, ...over });

beforeEach(async () => {
  api = await startNodeApi(
    { attachDelayMs: 60 },
    {
      vswitches: { 'vsw-a': '192.168.0.0/24', 'vsw-b': '192.168.1.0/28' },
      instanceType: 'ecs.g6.large',
      quota: { eniQuantity: 3, eniPrivateIpAddressQuantity: 6 },
    },
  );
  cloud = client();
});

afterEach(async () => {
  await api.close();
});

async function raw(query: Record<string, string>): Promise<{ status: number; body: Record<string, unknown> }> {
  const r = await fetch(`http://${api.endpoint}/?${new URLSearchParams(query)}`, { method: 'POST' });
  return { status: r.status, body: (await r.json()) as Record<string, unknown> };
}

describe('fake OpenAPI through our client', () => {
  it('DescribeInstanceTypes gives the ENI quotas; DescribeVSwitches the free IPs', async () => {
    expect(await cloud.instanceQuota('ecs.g6.large')).toEqual({
      eniQuantity: 3,
      ipsPerEni: 6,
      trunkSupported: false,
      eniTotalQuantity: 3,
      ipv6PerEni: 0,
    });
    const vs = await cloud.describeVSwitches(['vsw-a', 'vsw-b']);
    // /24: 256 - first - last three - the instance's primary IP.
    expect(vs).toEqual([
      { id: 'vsw-a', zone: 'cn-hangzhou-i', cidr: '192.168.0.0/24', available: 251 },
      { id: 'vsw-b', zone: 'cn-hangzhou-i', cidr: '192.168.1.0/28', available: 12 },
    ]);
  });

  it('signatures are checked: unknown key 404, wrong secret 400', async () => {
    const e1 = await client({ accessKeyId: 'nobody' })
      .instanceQuota('ecs.g6.large')
      .catch((e: unknown) => e);
    expect(e1).toMatchObject({ code: 'InvalidAccessKeyId.NotFound', status: 404 });
    const e2 = await client({ accessKeySecret: 'wrong' })
      .instanceQuota('ecs.g6.large')
      .catch((e: unknown) => e);
    expect(e2).toBeInstanceOf(CloudError);
    expect(e2).toMatchObject({ code: 'SignatureDoesNotMatch', status: 400 });
    expect((e2 as CloudError).requestId).toMatch(/^[0-9A-F-]{36}$/);
  });

  it('classic RPC: Action query parameter, RequestId, documented errors', async () => {
    const ok = await raw({ Action: 'DescribeInstanceTypes', Version: '2014-05-26', 'InstanceTypes.1': 'ecs.g6.large' });
    expect(ok.status).toBe(200);
    expect(ok.body['RequestId']).toEqual(expect.any(String));
    expect(ok.body['InstanceTypes']).toEqual({
      InstanceType: [expect.objectContaining({ InstanceTypeId: 'ecs.g6.large', EniQuantity: 3, EniPrivateIpAddressQuantity: 6 })],
    });
    const noAction = await raw({ Version: '2014-05-26' });
    expect(noAction).toMatchObject({ status: 400, body: { Code: 'MissingParameter' } });
    const unknown = await raw({ Action: 'RunEverything', Version: '2014-05-26' });
    expect(unknown).toMatchObject({ status: 404, body: { Code: 'InvalidAction.NotFound' } });
    const badPage = await raw({ Action: 'DescribeNetworkInterfaces', Version: '2014-05-26', RegionId: 'cn-hangzhou', MaxResults: '5' });
    expect(badPage).toMatchObject({ status: 400, body: { Code: 'InvalidParameter.MaxResults' } });
    const noEni = await raw({
      Action: 'DeleteNetworkInterface',
      Version: '2014-05-26',
      RegionId: 'cn-hangzhou',
      NetworkInterfaceId: 'eni-nope',
    });
    expect(noEni).toMatchObject({ status: 404, body: { Code: 'InvalidEniId.NotFound', RequestId: expect.any(String) } });
  });

  it('createEni: Create, Attach, Attaching -> InUse, with the requested IPs', async () => {
    const eni = await cloud.createEni({ vswitchId: 'vsw-a', securityGroups: ['sg-1'], ipCount: 3 });
    expect(eni.ips).toHaveLength(3);
    expect(eni.ips[0]).toBe(eni.primaryIp);
    expect(eni).toMatchObject({ vswitchId: 'vsw-a', vswitchCidr: '192.168.0.0/24', gateway: '192.168.0.253' });
    expect(api.enis.get(eni.eniId)?.status).toBe('InUse');
    expect(api.count('AttachNetworkInterface')).toBe(1);
    // The attach is asynchronous: the client polled through Attaching.
    expect(api.count('DescribeNetworkInterfaces')).toBeGreaterThan(1);
    const more = await cloud.assignIps(eni.eniId, 2);
    expect(more).toHaveLength(2);
    await cloud.unassignIps(eni.eniId, [more[0]!]);
    expect(api.enis.get(eni.eniId)?.secondaryIps).toHaveLength(3);
    const e = await cloud.unassignIps(eni.eniId, [eni.primaryIp]).catch((x: unknown) => x);
    expect(e).toMatchObject({ code: 'InvalidOperation.PrimaryIpCannotBeUnassigned', status: 403 });
    // Beyond EniPrivateIpAddressQuantity (6): 403.
    const over = await cloud.assignIps(eni.eniId, 3).catch((x: unknown) => x);
    expect(over).toMatchObject({ code: 'InvalidOperation.Ipv4CountExceeded', status: 403 });
    await cloud.deleteEni(eni.eniId);
    expect(api.enis.has(eni.eniId)).toBe(false);
    expect(api.count('DetachNetworkInterface')).toBe(1);
  });

  it('attach beyond EniQuantity fails with 403 and the created ENI is not leaked', async () => {
    await cloud.createEni({ vswitchId: 'vsw-a', securityGroups: ['sg-1'], ipCount: 1 });
    await cloud.createEni({ vswitchId: 'vsw-a', securityGroups: ['sg-1'], ipCount: 1 });
    const e = await cloud.createEni({ vswitchId: 'vsw-a', securityGroups: ['sg-1'], ipCount: 1 }).catch((x: unknown) => x);
    expect(e).toMatchObject({ code: 'EniPerInstanceLimitExceeded', status: 403 });
    expect([...api.enis.values()].filter((x) => x.status === 'Available')).toHaveLength(0);
    expect(api.enis.size).toBe(3);
  });

  it('trunk ENIs: InstanceType=Trunk, members through TrunkNetworkInstanceId up to EniTotalQuantity - EniQuantity', async () => {
    api.addInstanceType('ecs.g7.large', { eniQuantity: 3, eniPrivateIpAddressQuantity: 6, eniTrunkSupported: true, eniTotalQuantity: 5 });
    api.addInstance('i-node2', 'ecs.g7.large', 'vsw-a');
    const q = await cloud.instanceQuota('ecs.g7.large');
    expect(q).toMatchObject({ trunkSupported: true, eniTotalQuantity: 5 });
    expect(memberEniQuota(q)).toBe(2);
    expect(memberEniQuota(await cloud.instanceQuota('ecs.g6.large'))).toBe(0);
    // A trunk ENI on a type without trunk support: 403, nothing leaked.
    const refused = await cloud
      .createEni({ vswitchId: 'vsw-a', securityGroups: ['sg-1'], ipCount: 1, trunk: true })
      .catch((x: unknown) => x);
    expect(refused).toMatchObject({ code: 'InvalidOperation.InstanceTypeNotSupportTrunk', status: 403 });
    expect([...api.enis.values()].filter((x) => x.type === 'Trunk')).toHaveLength(0);
    const bad = await raw({
      Action: 'CreateNetworkInterface',
      Version: '2014-05-26',
      RegionId: 'cn-hangzhou',
      VSwitchId: 'vsw-a',
      SecurityGroupId: 'sg-1',
      InstanceType: 'Bogus',
    });
    expect(bad).toMatchObject({ status: 400, body: { Code: 'InvalidParameter.InstanceType' } });

    const c2 = client({ instanceId: 'i-node2' });
    const trunk = await c2.createEni({ vswitchId: 'vsw-a', securityGroups: ['sg-1'], ipCount: 1, trunk: true });
    expect(api.enis.get(trunk.eniId)).toMatchObject({ type: 'Trunk', status: 'InUse', instanceId: 'i-node2' });
    expect(api.calls.find((c) => c.action === 'CreateNetworkInterface' && c.params['InstanceType'] === 'Trunk')).toBeDefined();
    const m1 = await c2.createEni({ vswitchId: 'vsw-a', securityGroups: ['sg-1'], ipCount: 1, memberOf: trunk.eniId });
    await c2.createEni({ vswitchId: 'vsw-a', securityGroups: ['sg-1'], ipCount: 1, memberOf: trunk.eniId });
    expect(
      api.calls.filter((c) => c.action === 'AttachNetworkInterface' && c.params['TrunkNetworkInstanceId'] === trunk.eniId),
    ).toHaveLength(2);
    // Members do not take EniQuantity slots, but the third member is beyond EniTotalQuantity - EniQuantity.
    const third = await c2
      .createEni({ vswitchId: 'vsw-a', securityGroups: ['sg-1'], ipCount: 1, memberOf: trunk.eniId })
      .catch((x: unknown) => x);
    expect(third).toMatchObject({ code: 'EniPerInstanceLimitExceeded', status: 403 });
    const views = await c2.listEnis({ instanceId: 'i-node2' });
    expect(views.map((v) => v.type).sort()).toEqual(['Member', 'Member', 'Primary', 'Trunk']);
    expect(views.find((v) => v.eniId === m1.eniId)?.trunkEniId).toBe(trunk.eniId);
    expect((await c2.listEnis({ instanceId: 'i-node2', type: 'Secondary' })).map((v) => v.type)).toEqual([]);
    // A trunk with members cannot be detached; once they are gone it can.
    const busy = await c2.deleteEni(trunk.eniId).catch((x: unknown) => x);
    expect(busy).toMatchObject({ code: 'InvalidOperation.TrunkEniHasMembers' });
    for (const v of views.filter((x) => x.type === 'Member')) await c2.deleteEni(v.eniId);
    await c2.deleteEni(trunk.eniId);
    expect([...api.enis.values()].filter((x) => x.instanceId === 'i-node2').map((x) => x.type)).toEqual(['Primary']);
  });

  it('IPv6: AssignIpv6Addresses / UnassignIpv6Addresses, Ipv6Sets, EniIpv6AddressQuantity, vSwitches without IPv6', async () => {
    api.addVSwitch('vsw-6', 'cn-hangzhou-i', '192.168.2.0/24', 'vpc-test', '2408:4005:300::/64');
    api.addInstanceType('ecs.g7.large', { eniQuantity: 3, eniPrivateIpAddressQuantity: 6, eniIpv6AddressQuantity: 3 });
    api.addInstance('i-node3', 'ecs.g7.large', 'vsw-6');
    const c3 = client({ instanceId: 'i-node3' });
    expect((await c3.instanceQuota('ecs.g7.large')).ipv6PerEni).toBe(3);
    expect(await c3.ipv6CidrOf('vsw-6')).toBe('2408:4005:300::/64');
    expect(await c3.ipv6CidrOf('vsw-a')).toBeUndefined();
    const eni = await c3.createEni({ vswitchId: 'vsw-6', securityGroups: ['sg-1'], ipCount: 1 });
    const v6 = await c3.assignIpv6s(eni.eniId, 2);
    expect(v6).toHaveLength(2);
    for (const a of v6) expect(a).toMatch(/^2408:4005:300::[0-9a-f]+$/);
    const [view] = await c3.listEnis({ ids: [eni.eniId] });
    expect(view!.ipv6s.sort()).toEqual([...v6].sort());
    expect((await c3.eniInfo(view!)).ipv6s?.sort()).toEqual([...v6].sort());
    // Beyond EniIpv6AddressQuantity (3): 403.
    expect(await c3.assignIpv6s(eni.eniId, 2).catch((x: unknown) => x)).toMatchObject({
      code: 'InvalidOperation.Ipv6CountExceeded',
      status: 403,
    });
    await c3.unassignIpv6s(eni.eniId, [v6[0]!]);
    expect(api.enis.get(eni.eniId)!.ipv6s).toEqual([v6[1]]);
    expect(await c3.unassignIpv6s(eni.eniId, [v6[0]!]).catch((x: unknown) => x)).toMatchObject({
      code: 'InvalidIpv6Address.NotFound',
      status: 404,
    });
    // A vSwitch without an IPv6 CIDR.
    const v4only = await cloud.createEni({ vswitchId: 'vsw-a', securityGroups: ['sg-1'], ipCount: 1 });
    expect(await cloud.assignIpv6s(v4only.eniId, 1).catch((x: unknown) => x)).toMatchObject({
      code: 'InvalidVSwitch.Ipv6NotTurnOn',
      status: 403,
    });
    // The IPv6 gateway from the metadata service.
    const gw = await fetch(`http://${api.endpoint}/latest/meta-data/network/interfaces/macs/${api.enis.get(eni.eniId)!.mac}/ipv6-gateway`);
    expect(gw.status).toBe(404); // i-node1 is the metadata instance; i-node3's ENI is not on it
    await c3.deleteEni(eni.eniId);
    expect(api.vswitches.get('vsw-6')!.used6.size).toBe(0);
  });

  it('DescribeNetworkInterfaces pages with NextToken / MaxResults', async () => {
    for (let i = 0; i < 24; i++) {
      await raw({
        Action: 'CreateNetworkInterface',
        Version: '2014-05-26',
        RegionId: 'cn-hangzhou',
        VSwitchId: 'vsw-a',
        SecurityGroupId: 'sg-1',
      });
    }
    const before = api.count('DescribeNetworkInterfaces');
    const all = await cloud.listEnis({}, 10);
    expect(all).toHaveLength(25);
    expect(new Set(all.map((e) => e.eniId)).size).toBe(25);
    expect(api.count('DescribeNetworkInterfaces') - before).toBe(3);
    expect((await cloud.listEnis({ instanceId: 'i-node1' })).map((e) => e.type)).toEqual(['Primary']);
  });

  it('Throttling and 5xx are retried; other errors are not', async () => {
    const eni = await cloud.createEni({ vswitchId: 'vsw-a', securityGroups: ['sg-1'], ipCount: 1 });
    api.inject('AssignPrivateIpAddresses', { code: 'Throttling', status: 400, times: 2 });
    api.inject('AssignPrivateIpAddresses', { code: 'ServiceUnavailable', status: 503 });
    expect(await cloud.assignIps(eni.eniId, 1)).toHaveLength(1);
    expect(api.count('AssignPrivateIpAddresses')).toBe(4);
    api.inject('AssignPrivateIpAddresses', { code: 'InvalidVSwitchId.IpNotEnough', status: 403 });
    await expect(cloud.assignIps(eni.eniId, 1)).rejects.toMatchObject({ code: 'InvalidVSwitchId.IpNotEnough' });
    expect(api.count('AssignPrivateIpAddresses')).toBe(5);
    // A rate limit answers Throttling; with no retries left the error surfaces.
    api.rateLimit('DescribeInstanceTypes', 1);
    const c0 = client({ maxRetries: 0 });
    await c0.instanceQuota('ecs.g6.large');
    await expect(c0.instanceQuota('ecs.g6.large')).rejects.toMatchObject({ code: 'Throttling', status: 400, retryable: true });
  });

  it('injected latency slows the call by that much', async () => {
    api.setLatency({ CreateNetworkInterface: 150 });
    const t0 = Date.now();
    await cloud.createEni({ vswitchId: 'vsw-a', securityGroups: ['sg-1'], ipCount: 1 });
    expect(Date.now() - t0).toBeGreaterThanOrEqual(150);
  });

  it('a vSwitch out of IPs: 403 InvalidVSwitchId.IpNotEnough', async () => {
    const e = await cloud.createEni({ vswitchId: 'vsw-b', securityGroups: ['sg-1'], ipCount: 13 }).catch((x: unknown) => x);
    expect(e).toMatchObject({ code: 'InvalidVSwitchId.IpNotEnough', status: 403 });
    expect(gatewayOf('192.168.1.0/28')).toBe('192.168.1.13');
  });
});

describe('pool over the client and the fake', () => {
  it('fills ENIs up to the instance quota, frees them again', async () => {
    const pool = new EniIpPool({
      config: parsePoolConfig({
        max_pool_size: 2,
        vswitches: { 'cn-hangzhou-i': ['vsw-b', 'vsw-a'] },
        vswitch_selection_policy: 'most',
        security_groups: ['sg-1'],
      }),
      quota: await cloud.instanceQuota('ecs.g6.large'),
      cloud,
      clock: realClock,
      zone: 'cn-hangzhou-i',
    });
    const keys = Array.from({ length: 12 }, (_, i) => `default/p${i}`);
    const leases = await Promise.all(keys.map((k) => pool.allocate(k)));
    expect(new Set(leases.map((l) => l.ip)).size).toBe(12);
    // 2 secondary ENIs x 6 IPs, all in vsw-a (most free IPs).
    expect(new Set(leases.map((l) => l.eniId)).size).toBe(2);
    expect(leases.every((l) => l.vswitchId === 'vsw-a' && l.gateway === '192.168.0.253')).toBe(true);
    await expect(pool.allocate('default/p12')).rejects.toMatchObject({ code: 11 });
    for (const k of keys) pool.release(k);
    for (let i = 0; i < 500 && (pool.stats().releasing > 0 || pool.stats().idle > 2); i++) await new Promise((r) => setTimeout(r, 20));
    expect(pool.stats()).toMatchObject({ idle: 2, used: 0, releasing: 0 });
    expect(api.enis.size).toBe(2); // the primary ENI + one kept for the 2 idle IPs
    pool.stop();
  });
});
