/** An in-memory EniCloud for pool tests: counts calls, holds or fails them on demand. */
import type { EniCloud, EniInfo, VSwitchInfo } from '../src/pool';

type Op = 'createEni' | 'assignIps' | 'unassignIps' | 'deleteEni' | 'describeVSwitches';

export class MemoryCloud implements EniCloud {
  calls: { op: Op; arg: unknown }[] = [];
  enis = new Map<string, EniInfo>();
  vsw: VSwitchInfo[] = [
    { id: 'vsw-a', zone: 'cn-hangzhou-i', cidr: '192.168.0.0/24', available: 200 },
    { id: 'vsw-b', zone: 'cn-hangzhou-i', cidr: '192.168.1.0/24', available: 200 },
  ];
  /** Ops listed here wait until release(op) (or fail with failHeld). */
  private held = new Map<Op, { go: () => void; no: (e: Error) => void }[]>();
  hold = new Set<Op>();
  failures = new Map<Op, number>();
  failVSwitch = new Set<string>();
  private next = 10;

  count(op: Op): number {
    return this.calls.filter((c) => c.op === op).length;
  }

  heldCount(op: Op): number {
    return this.held.get(op)?.length ?? 0;
  }

  release(op: Op): void {
    this.hold.delete(op);
    for (const h of this.held.get(op)?.splice(0) ?? []) h.go();
  }

  failHeld(op: Op, msg = 'InternalError'): void {
    this.hold.delete(op);
    for (const h of this.held.get(op)?.splice(0) ?? []) h.no(new Error(msg));
  }

  private async gate(op: Op, arg: unknown): Promise<void> {
    this.calls.push({ op, arg });
    const f = this.failures.get(op) ?? 0;
    if (f > 0) {
      this.failures.set(op, f - 1);
      throw new Error(`${op}: Throttling`);
    }
    if (this.hold.has(op)) {
      await new Promise<void>((go, no) => this.held.set(op, [...(this.held.get(op) ?? []), { go, no }]));
    }
  }

  private ipIn(cidr: string): string {
    const base = cidr.split('/')[0]!.split('.').slice(0, 3).join('.');
    return `${base}.${this.next++}`;
  }

  async describeVSwitches(ids: string[]): Promise<VSwitchInfo[]> {
    await this.gate('describeVSwitches', ids);
    return this.vsw.filter((v) => ids.includes(v.id)).map((v) => ({ ...v }));
  }

  async createEni(req: { vswitchId: string; securityGroups: string[]; ipCount: number }): Promise<EniInfo> {
    await this.gate('createEni', req);
    if (this.failVSwitch.has(req.vswitchId)) throw new Error(`InvalidVSwitchId.IpNotEnough: ${req.vswitchId}`);
    const v = this.vsw.find((x) => x.id === req.vswitchId)!;
    const id = `eni-${this.enis.size + 1}${this.next}`;
    const ips = Array.from({ length: req.ipCount }, () => this.ipIn(v.cidr));
    v.available -= req.ipCount;
    const info: EniInfo = {
      eniId: id,
      mac: `00:16:3e:00:00:${(this.enis.size + 1).toString(16).padStart(2, '0')}`,
      primaryIp: ips[0]!,
      vswitchId: v.id,
      vswitchCidr: v.cidr,
      gateway: v.cidr.replace(/\.0\/\d+$/, '.253'),
      ips,
    };
    this.enis.set(id, info);
    return { ...info, ips: [...ips] };
  }

  async assignIps(eniId: string, count: number): Promise<string[]> {
    await this.gate('assignIps', { eniId, count });
    const e = this.enis.get(eniId)!;
    const ips = Array.from({ length: count }, () => this.ipIn(e.vswitchCidr));
    e.ips.push(...ips);
    return ips;
  }

  async unassignIps(eniId: string, ips: string[]): Promise<void> {
    await this.gate('unassignIps', { eniId, ips });
    const e = this.enis.get(eniId)!;
    e.ips = e.ips.filter((a) => !ips.includes(a));
  }

  async deleteEni(eniId: string): Promise<void> {
    await this.gate('deleteEni', eniId);
    this.enis.delete(eniId);
  }

  ipCount(): number {
    let n = 0;
    for (const e of this.enis.values()) n += e.ips.length;
    return n;
  }
}
