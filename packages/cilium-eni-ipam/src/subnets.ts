/** Subnet and security-group choice for a new ENI (pure). */
import type { Ec2Subnet } from './ec2';
import type { EniSpec } from './types';

/**
 * VPC + AZ must match; then `subnet-ids` (if given), else every `subnet-tags` pair (if given), else the
 * node's own subnet; among the candidates the one with the most free addresses wins. Undefined = none usable.
 */
export function selectSubnet(subnets: Ec2Subnet[], eni: EniSpec): Ec2Subnet | undefined {
  const inZone = subnets.filter(
    (s) => (!eni['vpc-id'] || s.vpcId === eni['vpc-id']) && (!eni['availability-zone'] || s.availabilityZone === eni['availability-zone']),
  );
  let cands: Ec2Subnet[];
  const ids = eni['subnet-ids'] ?? [];
  const tags = Object.entries(eni['subnet-tags'] ?? {});
  if (ids.length > 0) cands = inZone.filter((s) => ids.includes(s.id));
  else if (tags.length > 0) cands = inZone.filter((s) => tags.every(([k, v]) => s.tags[k] === v));
  else if (eni['node-subnet-id']) cands = inZone.filter((s) => s.id === eni['node-subnet-id']);
  else cands = inZone;
  cands = cands.filter((s) => s.availableAddresses > 0);
  return cands.sort((a, b) => b.availableAddresses - a.availableAddresses || a.id.localeCompare(b.id))[0];
}

export function matchesTags(tags: Record<string, string>, want: Record<string, string> | undefined): boolean {
  const w = Object.entries(want ?? {});
  return w.length > 0 && w.every(([k, v]) => tags[k] === v);
}
