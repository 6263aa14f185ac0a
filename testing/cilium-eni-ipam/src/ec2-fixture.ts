/** A VPC world in an EC2 emulator for tests and the benchmark: VPC, subnets, security groups, instances. */
import {
  CreateSecurityGroupCommand,
  CreateSubnetCommand,
  CreateTagsCommand,
  CreateVpcCommand,
  EC2Client,
  RunInstancesCommand,
  StopInstancesCommand,
  TerminateInstancesCommand,
} from '@aws-sdk/client-ec2';

export interface World {
  client: EC2Client;
  vpcId: string;
  vpcCidr: string;
  az: string;
  /** subnet ids by name */
  subnets: Record<string, string>;
  nodeSubnetId: string;
  securityGroupId: string;
  taggedSecurityGroupId: string;
}

export function rawClient(endpoint: string): EC2Client {
  return new EC2Client({
    region: 'us-east-1',
    endpoint,
    credentials: { accessKeyId: 'testing', secretAccessKey: 'testing' },
    maxAttempts: 3,
  });
}

/**
 * VPC 10.0.0.0/16 in us-east-1a with subnets: node 10.0.0.0/18, pods-a 10.0.64.0/18 (tag pods=a),
 * pods-b 10.0.128.0/18 (tag pods=b), small 10.0.192.0/28 (tag pods=small); SG "default-sg" and SG "tagged-sg" (tag role=pods).
 */
export async function makeWorld(endpoint: string): Promise<World> {
  const client = rawClient(endpoint);
  const az = 'us-east-1a';
  const vpc = await client.send(new CreateVpcCommand({ CidrBlock: '10.0.0.0/16' }));
  const vpcId = vpc.Vpc!.VpcId!;
  const subnets: Record<string, string> = {};
  const mk = async (name: string, cidr: string, tags: Record<string, string>) => {
    const s = await client.send(new CreateSubnetCommand({ VpcId: vpcId, CidrBlock: cidr, AvailabilityZone: az }));
    subnets[name] = s.Subnet!.SubnetId!;
    const all = { Name: name, ...tags };
    await client.send(
      new CreateTagsCommand({ Resources: [subnets[name]], Tags: Object.entries(all).map(([Key, Value]) => ({ Key, Value })) }),
    );
  };
  // Large subnets: moto picks addresses at random without checking they are free (see moto.ts: seeded).
  await mk('node', '10.0.0.0/18', {});
  await mk('pods-a', '10.0.64.0/18', { pods: 'a' });
  await mk('pods-b', '10.0.128.0/18', { pods: 'b' });
  await mk('small', '10.0.192.0/28', { pods: 'small' });
  const sg = await client.send(new CreateSecurityGroupCommand({ GroupName: 'default-sg', Description: 'nodes', VpcId: vpcId }));
  const tsg = await client.send(
    new CreateSecurityGroupCommand({
      GroupName: 'tagged-sg',
      Description: 'pods',
      VpcId: vpcId,
      TagSpecifications: [{ ResourceType: 'security-group', Tags: [{ Key: 'role', Value: 'pods' }] }],
    }),
  );
  await client.send(new CreateTagsCommand({ Resources: [tsg.GroupId!], Tags: [{ Key: 'role', Value: 'pods' }] }));
  return {
    client,
    vpcId,
    vpcCidr: '10.0.0.0/16',
    az,
    subnets,
    nodeSubnetId: subnets.node,
    securityGroupId: sg.GroupId!,
    taggedSecurityGroupId: tsg.GroupId!,
  };
}

export async function runInstances(w: World, count: number, instanceType = 'm5.large'): Promise<string[]> {
  const ids: string[] = [];
  while (ids.length < count) {
    const n = Math.min(50, count - ids.length);
    const r = await w.client.send(
      new RunInstancesCommand({
        ImageId: 'ami-12c6146b',
        MinCount: n,
        MaxCount: n,
        InstanceType: instanceType as never,
        SubnetId: w.nodeSubnetId,
        SecurityGroupIds: [w.securityGroupId],
        Placement: { AvailabilityZone: w.az },
      }),
    );
    ids.push(...(r.Instances ?? []).map((i) => i.InstanceId!));
  }
  return ids;
}

export async function stopInstance(w: World, id: string): Promise<void> {
  await w.client.send(new StopInstancesCommand({ InstanceIds: [id] }));
}
export async function terminateInstance(w: World, id: string): Promise<void> {
  await w.client.send(new TerminateInstancesCommand({ InstanceIds: [id] }));
}
