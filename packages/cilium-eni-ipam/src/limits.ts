/**
 * Instance-type limits (pkg/aws/eni/limits): ENIs per instance and IPv4 addresses per ENI (primary included).
 * Max usable IPs = (adapters - firstInterfaceIndex) * (ipv4 - 1). Overridable with a JSON map of the same form.
 */
export interface InstanceLimits {
  adapters: number;
  ipv4: number;
  ipv6: number;
  hypervisor: 'nitro' | 'xen' | '';
}

const L = (adapters: number, ipv4: number, hypervisor: InstanceLimits['hypervisor'] = 'nitro'): InstanceLimits => ({
  adapters,
  ipv4,
  ipv6: ipv4,
  hypervisor,
});

export const DEFAULT_LIMITS: Readonly<Record<string, InstanceLimits>> = Object.freeze({
  't2.micro': L(2, 2, 'xen'),
  't2.medium': L(3, 6, 'xen'),
  't2.large': L(3, 12, 'xen'),
  't3.micro': L(2, 2),
  't3.small': L(3, 4),
  't3.medium': L(3, 6),
  't3.large': L(3, 12),
  't3.xlarge': L(4, 15),
  'm4.large': L(2, 10, 'xen'),
  'm4.xlarge': L(4, 15, 'xen'),
  'm5.large': L(3, 10),
  'm5.xlarge': L(4, 15),
  'm5.2xlarge': L(4, 15),
  'm5.4xlarge': L(8, 30),
  'm5.8xlarge': L(8, 30),
  'm5.12xlarge': L(8, 30),
  'm5.16xlarge': L(15, 50),
  'm5.24xlarge': L(15, 50),
  'c5.large': L(3, 10),
  'c5.xlarge': L(4, 15),
  'c5.2xlarge': L(4, 15),
  'c5.4xlarge': L(8, 30),
  'r5.large': L(3, 10),
  'r5.xlarge': L(4, 15),
  'r5.2xlarge': L(4, 15),
});

export class LimitsTable {
  private readonly table: Map<string, InstanceLimits>;
  constructor(overrides: Record<string, Partial<InstanceLimits> & { adapters: number; ipv4: number }> = {}) {
    this.table = new Map(Object.entries(DEFAULT_LIMITS));
    for (const [k, v] of Object.entries(overrides)) {
      if (!Number.isInteger(v.adapters) || v.adapters < 1 || !Number.isInteger(v.ipv4) || v.ipv4 < 1) {
        throw new TypeError(`limits override ${k}: adapters and ipv4 must be positive integers, got ${JSON.stringify(v)}`);
      }
      this.table.set(k, { ipv6: v.ipv4, hypervisor: 'nitro', ...v });
    }
  }
  get(instanceType: string | undefined): InstanceLimits | undefined {
    return instanceType ? this.table.get(instanceType) : undefined;
  }
  /** Parses the --instance-limits flag: JSON {"type": {"adapters":N,"ipv4":M}}. */
  static parse(json: string | undefined): LimitsTable {
    if (!json) return new LimitsTable();
    let v: unknown;
    try {
      v = JSON.parse(json);
    } catch (e) {
      throw new TypeError(`--instance-limits: expected JSON {"type":{"adapters":N,"ipv4":M}}, got ${json}`, { cause: e });
    }
    if (!v || typeof v !== 'object' || Array.isArray(v)) throw new TypeError(`--instance-limits: expected an object, got ${json}`);
    return new LimitsTable(v as Record<string, InstanceLimits>);
  }
}

/** Addresses usable for pods on one instance (Cilium's formula). */
export function maxUsableIps(l: InstanceLimits, firstInterfaceIndex = 0): number {
  return Math.max(0, l.adapters - firstInterfaceIndex) * (l.ipv4 - 1);
}
