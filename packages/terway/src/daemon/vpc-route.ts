/**
 * VPC route mode (Terway's "VPC" daemon mode): the node owns a pod CIDR (its
 * `spec.podCIDR`, routed to the node by the VPC route table); pods get its
 * addresses, handed out locally, no cloud call. Same surface as the pool's
 * (allocate / release / leaseOf / leases / gc) so the daemon serves either.
 * The network and broadcast addresses are never handed out; an address freed
 * is reused last (the lowest never-used one comes first).
 */
import type { IpLease } from '../pool';
import { PoolExhaustedError } from '../pool';
import { POD_GATEWAY } from '../datapath/eniip-veth';
import { KeyedLeases } from './keyed-leases';

function ipToInt(ip: string): number {
  const p = ip.split('.').map(Number);
  if (p.length !== 4 || p.some((x) => !Number.isInteger(x) || x < 0 || x > 255)) throw new TypeError(`not an IPv4 address: "${ip}"`);
  return ((p[0]! << 24) | (p[1]! << 16) | (p[2]! << 8) | p[3]!) >>> 0;
}

function intToIp(n: number): string {
  return [n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255].join('.');
}

export function parseCidr4(cidr: string): { base: number; prefix: number } {
  const [ip, len] = cidr.split('/');
  const prefix = Number(len);
  if (!ip || !Number.isInteger(prefix) || prefix < 1 || prefix > 30)
    throw new TypeError(`pod CIDR: expected an IPv4 CIDR with a prefix of 1-30, got "${cidr}"`);
  const mask = prefix === 0 ? 0 : (0xffffffff << (32 - prefix)) >>> 0;
  return { base: (ipToInt(ip) & mask) >>> 0, prefix };
}

export class VpcRouteAllocator extends KeyedLeases<string> {
  private readonly used = new Set<string>();
  private readonly freed: string[] = [];
  private next: number;
  private readonly first: number;
  private readonly last: number;

  constructor(readonly podCidr: string) {
    super();
    const { base, prefix } = parseCidr4(podCidr);
    this.first = base + 1;
    this.last = base + 2 ** (32 - prefix) - 2;
    this.next = this.first;
  }

  get capacity(): number {
    return this.last - this.first + 1;
  }

  protected lease(ip: string): IpLease {
    return { ip, eniId: '', mac: '', vswitchId: '', vswitchCidr: this.podCidr, gateway: POD_GATEWAY };
  }

  /** Adopts stored leases (start-up); those outside the pod CIDR are dropped and returned. */
  restore(leases: { key: string; ip: string }[]): string[] {
    const dropped: string[] = [];
    for (const l of leases) {
      const n = ipToInt(l.ip);
      if (n < this.first || n > this.last || this.used.has(l.ip)) {
        dropped.push(l.key);
        continue;
      }
      this.byKey.set(l.key, l.ip);
      this.used.add(l.ip);
    }
    return dropped;
  }

  async allocate(key: string): Promise<IpLease> {
    const held = this.byKey.get(key);
    if (held) return this.lease(held);
    let ip: string | undefined;
    while (this.next <= this.last && !ip) {
      const c = intToIp(this.next++);
      if (!this.used.has(c)) ip = c;
    }
    while (!ip && this.freed.length) {
      const c = this.freed.shift()!;
      if (!this.used.has(c)) ip = c;
    }
    if (!ip) throw new PoolExhaustedError(`pod CIDR ${this.podCidr} has no free address (${this.capacity} in use)`);
    this.byKey.set(key, ip);
    this.used.add(ip);
    return this.lease(ip);
  }

  release(key: string): boolean {
    const ip = this.byKey.get(key);
    if (!ip) return false;
    this.byKey.delete(key);
    this.used.delete(ip);
    this.freed.push(ip);
    return true;
  }
}
