// Each EC2 call of SdkEc2 (our Query API client) against moto_server, read back through the AWS SDK (test
// support only): moto parses requests with the EC2 service model, so a parameter named otherwise than EC2
// documents it would be ignored or refused, and what we read must be what the SDK reads.
import { DescribeNetworkInterfacesCommand, type NetworkInterface } from '@aws-sdk/client-ec2';
import { SdkEc2 } from '../src/ec2';
import { TokenBucket } from '../src/rate-limit';
import { makeWorld, runInstances, startMoto, type Moto, type World } from '@cnikit/cilium-eni-ipam-testing';

let moto: Moto;
let w: World;
let ec2: SdkEc2;

beforeAll(async () => {
  moto = await startMoto();
  w = await makeWorld(moto.endpoint);
  ec2 = new SdkEc2({ endpoint: moto.endpoint, limiter: new TokenBucket(1000, 1000) });
}, 120_000);
afterAll(async () => {
  ec2?.client.destroy();
  w?.client.destroy();
  await moto?.stop();
});

async function sdkEni(id: string): Promise<NetworkInterface> {
  const r = await w.client.send(new DescribeNetworkInterfacesCommand({ NetworkInterfaceIds: [id] }));
  return r.NetworkInterfaces![0]!;
}

test('create (security groups, tags, description, secondary count), attach, assign, unassign, detach, delete', async () => {
  const [instance] = await runInstances(w, 1);
  const eni = await ec2.createNetworkInterface({
    subnetId: w.subnets['pods-a']!,
    securityGroups: [w.securityGroupId, w.taggedSecurityGroupId],
    description: 'pods & <more>',
    tags: { 'cilium.io/cluster': 'c1', empty: '' },
    secondaryCount: 3,
  });
  const sdk = await sdkEni(eni.id);
  expect(sdk.Groups!.map((g) => g.GroupId).sort()).toEqual([w.securityGroupId, w.taggedSecurityGroupId].sort());
  expect(sdk.Description).toBe('pods & <more>');
  expect(Object.fromEntries(sdk.TagSet!.map((t) => [t.Key, t.Value ?? '']))).toEqual({ 'cilium.io/cluster': 'c1', empty: '' });
  expect(sdk.PrivateIpAddresses!.length).toBe(4);
  expect(eni).toMatchObject({
    subnetId: w.subnets['pods-a'],
    vpcId: w.vpcId,
    ip: sdk.PrivateIpAddress,
    tags: { 'cilium.io/cluster': 'c1', empty: '' },
  });
  expect(eni.addresses.sort()).toEqual(
    sdk
      .PrivateIpAddresses!.map((a) => a.PrivateIpAddress)
      .filter((a) => a !== sdk.PrivateIpAddress)
      .sort(),
  );

  const attachmentId = await ec2.attachNetworkInterface(eni.id, instance!, 1);
  expect(attachmentId).toBe((await sdkEni(eni.id)).Attachment!.AttachmentId);
  await ec2.setDeleteOnTermination(eni.id, attachmentId); // accepted; moto ignores Attachment.* (it changes no attachment)

  const before = new Set((await sdkEni(eni.id)).PrivateIpAddresses!.map((a) => a.PrivateIpAddress));
  const answered = await ec2.assignPrivateIpAddresses(eni.id, 2);
  const added = (await sdkEni(eni.id)).PrivateIpAddresses!.map((a) => a.PrivateIpAddress!).filter((a) => !before.has(a));
  expect(added.length).toBe(2);
  expect(answered).toEqual(expect.arrayContaining(added)); // moto answers every address of the ENI, not only the new ones
  await ec2.unassignPrivateIpAddresses(eni.id, [eni.addresses[0]!, added[0]!]);
  const left = (await sdkEni(eni.id)).PrivateIpAddresses!.map((a) => a.PrivateIpAddress);
  expect(left).not.toContain(added[0]);
  expect(left).not.toContain(eni.addresses[0]);
  expect(left.length).toBe(4);

  const [ours] = await ec2.describeNetworkInterfaces({ instanceId: instance, tags: { 'cilium.io/cluster': 'c1' } });
  expect(ours).toMatchObject({ id: eni.id, instanceId: instance, attachmentId, deviceIndex: 1 });
  expect([ours!.ip, ...ours!.addresses].sort()).toEqual([...left].sort());

  await ec2.detachNetworkInterface(attachmentId);
  expect((await sdkEni(eni.id)).Status).toBe('available');
  await ec2.deleteNetworkInterface(eni.id);
  expect(await ec2.describeNetworkInterfaces({ ids: [eni.id] })).toEqual([]);
});

test('subnets, VPCs, security groups by tag, instances (a missing one is undefined)', async () => {
  const subnets = await ec2.describeSubnets();
  expect(subnets.find((s) => s.id === w.subnets.small)).toMatchObject({
    cidr: '10.0.192.0/28',
    vpcId: w.vpcId,
    availabilityZone: w.az,
    availableAddresses: 11,
    tags: { Name: 'small', pods: 'small' },
  });
  expect((await ec2.describeVpcs()).find((v) => v.id === w.vpcId)).toEqual({
    id: w.vpcId,
    primaryCidr: '10.0.0.0/16',
    cidrs: ['10.0.0.0/16'],
  });
  expect(await ec2.describeSecurityGroups({ role: 'pods' })).toEqual([w.taggedSecurityGroupId]);
  const [id] = await runInstances(w, 1, 'c5.xlarge');
  expect(await ec2.describeInstance(id!)).toEqual({
    id,
    state: 'running',
    type: 'c5.xlarge',
    vpcId: w.vpcId,
    subnetId: w.nodeSubnetId,
    availabilityZone: w.az,
  });
  expect(await ec2.describeInstance('i-0123456789abcdef0')).toBeUndefined();
});
