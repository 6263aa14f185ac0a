/** What the pool needs from the cloud, and what it hands out. */

/** An attached ENI as the cloud reports it once InUse. `ips` holds the primary IP first. */
export interface EniInfo {
  eniId: string;
  mac: string;
  primaryIp: string;
  vswitchId: string;
  /** The vSwitch CIDR, e.g. 192.168.0.0/24. */
  vswitchCidr: string;
  /** The vSwitch gateway (the first host of its CIDR on Alibaba Cloud). */
  gateway: string;
  ips: string[];
  /** IPv6 addresses on the ENI (dual stack). */
  ipv6s?: string[];
}

export interface VSwitchInfo {
  id: string;
  zone: string;
  cidr: string;
  available: number;
}

/**
 * The cloud operations of the ENI multi-IP pool. Implementations wait for
 * async states themselves (createEni returns once the ENI is InUse on the
 * instance, deleteEni detaches, waits for Available, deletes) and throw
 * CloudError on failures.
 */
export interface EniCloud {
  describeVSwitches(ids: string[]): Promise<VSwitchInfo[]>;
  createEni(req: { vswitchId: string; securityGroups: string[]; ipCount: number }): Promise<EniInfo>;
  assignIps(eniId: string, count: number): Promise<string[]>;
  unassignIps(eniId: string, ips: string[]): Promise<void>;
  deleteEni(eniId: string): Promise<void>;
}

/** ENI quotas of the instance type (DescribeInstanceTypes). */
export interface EniQuota {
  /** EniQuantity: ENIs the instance can hold, the primary one included. */
  eniQuantity: number;
  /** EniPrivateIpAddressQuantity: private IPs per ENI, its primary IP included. */
  ipsPerEni: number;
}

/** One pod's address: an ENI secondary (or primary) IP. */
export interface IpLease {
  ip: string;
  eniId: string;
  mac: string;
  vswitchId: string;
  vswitchCidr: string;
  gateway: string;
  /** Dual stack (`ip_stack: dual`): the pod's IPv6 on the same ENI, the vSwitch's IPv6 CIDR and gateway. */
  ip6?: string;
  vswitchCidr6?: string;
  gateway6?: string;
}

export interface PoolStats {
  idle: number;
  used: number;
  reserved: number;
  releasing: number;
  inflight: number;
  enis: number;
  creatingEnis: number;
  waiters: number;
  capacity: number;
}
