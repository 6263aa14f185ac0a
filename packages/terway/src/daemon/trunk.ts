/**
 * The trunk ENI of `enable_eni_trunking` (Terway's eni_conf key of the same name). On an
 * instance type with EniTrunkSupported, terwayd keeps one trunk ENI attached: created with
 * CreateNetworkInterface InstanceType=Trunk the first time, adopted from DescribeNetworkInterfaces
 * (Type "Trunk") after a restart. Member ENIs attach through it (AttachNetworkInterface
 * TrunkNetworkInstanceId) and are counted by the kubelet as `aliyun/member-eni`.
 */
import type { AliyunEniCloud, EniView, InstanceQuota } from '../cloud/aliyun';
import type { PoolConfig } from '../pool';

export interface TrunkOptions {
  cloud: Pick<AliyunEniCloud, 'createEni'>;
  config: PoolConfig;
  quota: InstanceQuota;
  /** Every ENI of the instance, as listed at start-up. */
  views: EniView[];
  zone: string;
  defaultVSwitch: string;
  log: (msg: string, fields?: Record<string, unknown>) => void;
}

/** The trunk ENI (existing or new), or undefined when trunking is off or the instance type cannot have one. */
export async function ensureTrunkEni(o: TrunkOptions): Promise<{ eniId: string; created: boolean } | undefined> {
  if (!o.config.enableTrunk) return undefined;
  if (!o.quota.trunkSupported) {
    o.log('trunk: enable_eni_trunking is set but the instance type has no EniTrunkSupported; aliyun/member-eni not registered');
    return undefined;
  }
  const found = o.views.find((v) => v.type === 'Trunk' && (v.status === 'InUse' || v.status === 'Attaching'));
  if (found) return { eniId: found.eniId, created: false };
  const vswitchId = o.config.vswitches[o.zone]?.[0] ?? o.defaultVSwitch;
  const eni = await o.cloud.createEni({ vswitchId, securityGroups: o.config.securityGroups, ipCount: 1, trunk: true });
  o.log('trunk: created', { eni: eni.eniId, vswitch: vswitchId });
  return { eniId: eni.eniId, created: true };
}
