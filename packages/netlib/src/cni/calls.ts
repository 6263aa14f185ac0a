/**
 * The call log: each run of one of our plugins (ADD, DEL, CHECK, GC, STATUS) appends one line to
 * `<dir>/<type>.log`, which `doctor serve` turns into latency histograms per plugin (docs/doctor.md). The line
 * is `<command> <ok 1|0> <ms>`: the plugin process's whole life, start-up included, which is what the runtime
 * waits for. The directory exists only while doctor serve runs on the node; without it the append fails at
 * open() (ENOENT, one syscall) and nothing else happens, so a node without doctor pays nothing measurable.
 * /var/lib/cni is the runtime's own per-node state directory (libcni's cache lives there too).
 */
import { appendFileSync, readFileSync, readdirSync, renameSync, rmSync } from 'node:fs';
import { join } from 'node:path';

export const CALL_LOG_DIR = '/var/lib/cni/cnikit/calls';

export interface CallRecord {
  plugin: string;
  command: string;
  ok: boolean;
  ms: number;
}

/** Appends this process's call; never throws (a plugin's answer must not depend on its log). */
export function recordCall(plugin: string | undefined, command: string | undefined, ok: boolean, dir = CALL_LOG_DIR): void {
  if (!plugin || !command || command === 'VERSION' || !/^[\w.-]+$/.test(plugin)) return;
  try {
    appendFileSync(join(dir, `${plugin}.log`), `${command} ${ok ? 1 : 0} ${Math.round(process.uptime() * 1000)}\n`);
  } catch {
    // no doctor serve on this node (or it cannot be written): the call is not counted
  }
}

/**
 * Takes every record written so far: each file is renamed first (appends that had it open land in the
 * renamed file, later ones start a new file), then read and removed. Lines that do not parse are skipped.
 */
export function takeCalls(dir = CALL_LOG_DIR): CallRecord[] {
  const out: CallRecord[] = [];
  let names: string[];
  try {
    names = readdirSync(dir).filter((n) => n.endsWith('.log'));
  } catch {
    return out;
  }
  for (const name of names) {
    const taken = join(dir, `${name}.${process.pid}.taken`);
    try {
      renameSync(join(dir, name), taken);
    } catch {
      continue;
    }
    const plugin = name.slice(0, -'.log'.length);
    for (const line of readFileSync(taken, 'utf8').split('\n')) {
      const m = /^([A-Z]+) ([01]) (\d+)$/.exec(line);
      if (m) out.push({ plugin, command: m[1]!, ok: m[2] === '1', ms: Number(m[3]) });
    }
    rmSync(taken, { force: true });
  }
  return out;
}
