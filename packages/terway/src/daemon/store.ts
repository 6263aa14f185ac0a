/**
 * Local lease state (Terway's /var/lib/cni/terway/pod.db), as one JSON
 * file written crash-safely: write a temp file, fsync, rename over the old
 * one. A torn or missing file reads as empty (start-up then reconciles with
 * the kernel and the cloud).
 */
import * as fs from 'node:fs';
import * as path from 'node:path';

export interface StoredLease {
  key: string;
  ip: string;
  eniId: string;
  /** Dual stack: the pod's IPv6. */
  ip6?: string;
  containerId: string;
  /** The pod's netns path from AllocIP (ipvlan GC looks there for the pod's interface). */
  netns?: string;
  reservedUntil?: number;
}

export class LeaseStore {
  constructor(readonly file: string) {}

  load(): StoredLease[] {
    try {
      const j = JSON.parse(fs.readFileSync(this.file, 'utf8')) as { leases?: StoredLease[] };
      return Array.isArray(j.leases) ? j.leases : [];
    } catch {
      return [];
    }
  }

  save(leases: StoredLease[]): void {
    fs.mkdirSync(path.dirname(this.file), { recursive: true });
    const tmp = `${this.file}.${process.pid}.tmp`;
    const fd = fs.openSync(tmp, 'w', 0o600);
    try {
      fs.writeSync(fd, JSON.stringify({ version: 1, leases }));
      fs.fsyncSync(fd);
    } finally {
      fs.closeSync(fd);
    }
    fs.renameSync(tmp, this.file);
  }
}
