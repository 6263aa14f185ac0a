/**
 * Kernel parameters under /proc/sys, read and written inside a given namespace.
 *
 * /proc/sys/net shows the namespace of the thread that opens the file, so the file is
 * opened, read or written, and closed while inside the namespace (runInNetns). These
 * calls are synchronous: a sysctl is one small file.
 *
 * Keys are relative to /proc/sys, with slashes ("net/ipv4/conf/eth0.100/rp_filter",
 * preferred: unambiguous) or dots ("net.ipv4.conf.all.rp_filter"). Interface names may
 * contain dots, so in dotted keys under net.{ipv4,ipv6,mpls}.{conf,neigh} the part
 * between the third dot and the last dot is taken as one interface name, whatever it
 * contains ("net.ipv4.conf.eth0.100.rp_filter" -> net/ipv4/conf/eth0.100/rp_filter).
 * Every other dotted key has all its dots turned into slashes.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { runInNetns, type Netns } from '../netns/handle';

const PROC_SYS = '/proc/sys/';
/** Dotted prefixes followed by an interface name, then a parameter. */
const PER_INTERFACE = /^net\.(ipv4|ipv6|mpls)\.(conf|neigh)\.(.+)\.([^.]+)$/;

/** The /proc/sys path for a key (see the module comment for the dotted-key rule). */
export function sysctlPath(key: string): string {
  // The regular expressions only for the forms that need them: a plugin call passes relative slash keys.
  let rel = key.startsWith(PROC_SYS) ? key.slice(PROC_SYS.length) : key.startsWith('/') ? key.replace(/^\/+/, '') : key;
  if (!rel.includes('/')) {
    const m = PER_INTERFACE.exec(rel);
    rel = m ? `net/${m[1]}/${m[2]}/${m[3]}/${m[4]}` : rel.replace(/\./g, '/');
  }
  const parts = rel.split('/');
  if (rel === '' || parts.some((p) => p === '' || p === '.' || p === '..'))
    throw new TypeError(`invalid sysctl key ${JSON.stringify(key)}`);
  return PROC_SYS + rel;
}

/** Reads a sysctl in `ns`; the value without its trailing newline. Throws ENOENT-coded errors for unknown keys. */
export function get(ns: Netns, key: string): string {
  const p = sysctlPath(key);
  return runInNetns(ns, () => readFileSync(p, 'utf8')).replace(/\n$/, '');
}

/** Writes a sysctl in `ns`. */
export function set(ns: Netns, key: string, value: string | number): void {
  const p = sysctlPath(key);
  runInNetns(ns, () => writeFileSync(p, String(value)));
}
