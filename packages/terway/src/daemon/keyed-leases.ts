/**
 * What the address sources that hold one value per pod key share (exclusive ENIs: the pod's ENI; VPC route:
 * the pod's address): the lease of a key, all leases, and GC of the keys whose pod is gone. The pool keeps
 * its own (leases there carry reservations).
 */
import type { IpLease } from '../pool';

export abstract class KeyedLeases<V> {
  protected readonly byKey = new Map<string, V>();

  /** The lease a held value stands for. */
  protected abstract lease(v: V): IpLease;

  /** Gives the value of `key` back; false for an unknown key. */
  abstract release(key: string): boolean;

  leaseOf(key: string): IpLease | undefined {
    const v = this.byKey.get(key);
    return v === undefined ? undefined : this.lease(v);
  }

  leases(): { key: string; lease: IpLease; reservedUntil?: number }[] {
    return [...this.byKey].map(([key, v]) => ({ key, lease: this.lease(v) }));
  }

  /** Releases every key `alive` denies; returns them. */
  gc(alive: (key: string) => boolean): string[] {
    const gone = [...this.byKey.keys()].filter((k) => !alive(k));
    for (const k of gone) this.release(k);
    return gone;
  }
}
