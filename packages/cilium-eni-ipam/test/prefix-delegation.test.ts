// Prefix delegation's success path against an in-memory EC2 (moto answers Ipv4PrefixCount with no prefix,
// see node-sync.moto.test.ts for the /32 fallback): /28s are requested per ENI slot and expanded to 16 IPs.
import type { CreateEniRequest, Ec2Api, Ec2Eni } from '../src/ec2';
import { LimitsTable } from '../src/limits';
import { NodeSyncer, newMemory } from '../src/node-sync';
import type { CiliumNode } from '../src/types';

class PrefixEc2 implements Partial<Ec2Api> {
  calls: string[] = [];
  next = 0;
  enis: Ec2Eni[] = [
    {
      id: 'eni-0',
      mac: '02:00:00:00:00:01',
      ip: '10.0.0.10',
      subnetId: 'subnet-1',
      vpcId: 'vpc-1',
      instanceId: 'i-1',
      deviceIndex: 0,
      addresses: [],
      prefixes: [],
      securityGroups: ['sg-1'],
      tags: {},
    },
  ];
  async describeNetworkInterfaces() {
    this.calls.push('describe');
    return this.enis.map((e) => ({ ...e, addresses: [...e.addresses], prefixes: [...e.prefixes] }));
  }
  async describeSubnets() {
    return [{ id: 'subnet-1', cidr: '10.0.0.0/16', vpcId: 'vpc-1', availabilityZone: 'a', availableAddresses: 60000, tags: {} }];
  }
  async describeVpcs() {
    return [{ id: 'vpc-1', primaryCidr: '10.0.0.0/16', cidrs: ['10.0.0.0/16'] }];
  }
  async describeInstance() {
    return undefined;
  }
  private prefix(): string {
    return `10.0.${16 + this.next++}.0/28`;
  }
  async assignPrefixes(eniId: string, count: number) {
    this.calls.push(`prefixes ${count}`);
    const e = this.enis.find((x) => x.id === eniId)!;
    const p = Array.from({ length: count }, () => this.prefix());
    e.prefixes.push(...p);
    return p;
  }
  async createNetworkInterface(req: CreateEniRequest) {
    this.calls.push(`create prefixes=${req.prefixCount}`);
    const e: Ec2Eni = {
      id: `eni-${this.enis.length}`,
      mac: '02:00:00:00:00:02',
      ip: '10.0.0.20',
      subnetId: req.subnetId,
      vpcId: 'vpc-1',
      addresses: [],
      prefixes: Array.from({ length: req.prefixCount ?? 0 }, () => this.prefix()),
      securityGroups: req.securityGroups,
      tags: req.tags,
    };
    this.enis.push(e);
    return { ...e, prefixes: [...e.prefixes] };
  }
  async attachNetworkInterface(eniId: string, instanceId: string, deviceIndex: number) {
    const e = this.enis.find((x) => x.id === eniId)!;
    Object.assign(e, { instanceId, deviceIndex });
    return `attach-${eniId}`;
  }
  async setDeleteOnTermination() {
    this.calls.push('dot');
  }
}

const node = (pre: number, max = 0): CiliumNode => ({
  metadata: { name: 'n' },
  spec: {
    'instance-id': 'i-1',
    eni: { 'instance-type': 'm5.large', 'vpc-id': 'vpc-1', 'availability-zone': 'a', 'use-prefix-delegation': true },
    ipam: { 'pre-allocate': pre, 'max-allocate': max },
  },
});

test('pre-allocate 8 on nitro with prefix delegation: one /28 on eth0 = 16 IPs in the pool', async () => {
  const ec2 = new PrefixEc2();
  const r = await new NodeSyncer(ec2 as unknown as Ec2Api, { clusterName: 'c', limits: new LimitsTable() }).sync(node(8), newMemory());
  expect(r.error).toBeUndefined();
  expect(ec2.calls).toEqual(['describe', 'prefixes 1']);
  expect(Object.keys(r.pool)).toHaveLength(16);
  expect(r.enis['eni-0'].prefixes).toEqual(['10.0.16.0/28']);
});

test('40 IPs: 3 prefixes on eth0; 200 IPs: eth0 full (9 slots) then a new ENI created with prefixes', async () => {
  let ec2 = new PrefixEc2();
  let r = await new NodeSyncer(ec2 as unknown as Ec2Api, { clusterName: 'c', limits: new LimitsTable() }).sync(node(40), newMemory());
  expect(ec2.calls).toEqual(['describe', 'prefixes 3']);
  expect(Object.keys(r.pool)).toHaveLength(48);
  ec2 = new PrefixEc2();
  r = await new NodeSyncer(ec2 as unknown as Ec2Api, { clusterName: 'c', limits: new LimitsTable() }).sync(node(200), newMemory());
  expect(ec2.calls).toEqual(['describe', 'prefixes 9', 'create prefixes=4', 'dot']);
  expect(Object.keys(r.pool)).toHaveLength(13 * 16);
});

test('max-allocate caps the request in IPs, not in prefixes (cilium#32205: a cap of 20 asks for 2 /28s, not 20)', async () => {
  const ec2 = new PrefixEc2();
  const r = await new NodeSyncer(ec2 as unknown as Ec2Api, { clusterName: 'c', limits: new LimitsTable() }).sync(
    node(100, 20),
    newMemory(),
  );
  expect(ec2.calls).toEqual(['describe', 'prefixes 2']);
  expect(Object.keys(r.pool)).toHaveLength(32);
});
