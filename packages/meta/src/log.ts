/**
 * The meta-plugins' log: netlib's JSON-lines logger on `log_options.log_file`,
 * with spidernet-io's size/age/count rotation done at open time (one process per
 * CNI call, so there is no long-lived writer to rotate under).
 */
import { readdirSync, renameSync, statSync, unlinkSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { createLogger, type LogFields } from '@cnikit/netlib';
import type { LogOptions } from './config';

/** Logs at info, or at `level` (DEL's ignored config fields are warnings). */
export type LogFn = (msg: string, fields?: LogFields, level?: 'info' | 'warn') => void;

/** Renames file -> file.<timestamp> when it is over the size limit, then prunes old rotations. */
export function rotateIfNeeded(opts: LogOptions, now = Date.now()): void {
  let size: number;
  try {
    size = statSync(opts.file).size;
  } catch {
    return; // no file yet
  }
  if (size < opts.maxSizeMiB * 1024 * 1024) return;
  try {
    renameSync(opts.file, `${opts.file}.${now}`);
  } catch {
    return; // another call rotated it first
  }
  const dir = dirname(opts.file);
  const base = basename(opts.file);
  const rotated = readdirSync(dir)
    .filter((f) => f.startsWith(`${base}.`) && /^\d+$/.test(f.slice(base.length + 1)))
    .map((f) => ({ f, t: Number(f.slice(base.length + 1)) }))
    .sort((a, b) => b.t - a.t);
  const maxAgeMs = opts.maxAgeDays * 86_400_000;
  rotated.forEach(({ f, t }, i) => {
    if (i >= opts.maxCount || now - t > maxAgeMs) {
      try {
        unlinkSync(join(dir, f));
      } catch {
        // already gone
      }
    }
  });
}

/** Opens the plugin's log with the container ID and interface on every line. Never throws. */
export function openLog(opts: LogOptions, plugin: string, containerId: string, ifName: string): LogFn {
  try {
    rotateIfNeeded(opts);
  } catch {
    // Rotation is best effort: logging must never fail a CNI call.
  }
  const logger = createLogger({ file: opts.file, level: opts.level, module: plugin, fields: { containerId, ifName } });
  return (msg, fields, level = 'info') => logger[level](msg, fields);
}
