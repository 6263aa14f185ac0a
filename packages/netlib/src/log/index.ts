/**
 * JSON-lines logging to a file, and per-module tracing to stderr.
 *
 * stdout is the CNI protocol channel: nothing here ever writes to it. A line
 * is {"time","level","msg","module"?, ...fields}; plugins put the container
 * ID in the logger's fields so it lands on every line. Writes are
 * synchronous appends (one short-lived process per CNI call, and a crash
 * must not lose the line that explains it); a level check comes first so a
 * disabled call costs a comparison.
 *
 * CNIKIT_TRACE=<module>[,<module>...] (or "*" / "all") mirrors every call of
 * the named modules, whatever their level, to stderr; netlib's own modules
 * trace through trace('<module>', ...).
 */
import { closeSync, mkdirSync, openSync, writeSync } from 'node:fs';
import { dirname } from 'node:path';

export type LogLevel = 'debug' | 'info' | 'warn' | 'error';
export type LogFields = Record<string, unknown>;

export const LOG_LEVELS: readonly LogLevel[] = ['debug', 'info', 'warn', 'error'];
export const TRACE_ENV = 'CNIKIT_TRACE';

const ENVELOPE = new Set(['time', 'level', 'msg', 'module']);
const RANK: Record<LogLevel | 'off', number> = { debug: 0, info: 1, warn: 2, error: 3, off: 4 };

export interface LoggerOptions {
  /** File to append to; its directory is created on the first write. Without it only traces are written. */
  file?: string;
  /** Lowest level written to the file; default "info". */
  level?: LogLevel | 'off';
  /** Module name: written on each line and matched against CNIKIT_TRACE. */
  module?: string;
  /** Fields on every line, e.g. { containerId }. */
  fields?: LogFields;
}

export interface Logger {
  readonly module: string | undefined;
  debug(msg: string, fields?: LogFields): void;
  info(msg: string, fields?: LogFields): void;
  warn(msg: string, fields?: LogFields): void;
  error(msg: string, fields?: LogFields): void;
  /** True when a call at this level would write anything (file or trace); guards costly field building. */
  isEnabled(level: LogLevel): boolean;
  /** A logger with more fixed fields (and optionally another module) writing to the same file. */
  child(fields: LogFields, module?: string): Logger;
}

/** Checks a level name from a plugin config; throws with the accepted values. */
export function parseLogLevel(value: unknown): LogLevel | 'off' {
  if (typeof value === 'string' && (value === 'off' || (LOG_LEVELS as readonly string[]).includes(value))) return value as LogLevel | 'off';
  throw new TypeError(`log: invalid level ${JSON.stringify(value)}: expected one of ${[...LOG_LEVELS, 'off'].join(', ')}`);
}

export function createLogger(opts: LoggerOptions = {}): Logger {
  const level = opts.level ?? 'info';
  if (!(level in RANK)) parseLogLevel(level);
  return new JsonLogger(opts.file, RANK[level], opts.module, { ...opts.fields });
}

class JsonLogger implements Logger {
  constructor(
    private readonly file: string | undefined,
    private readonly minRank: number,
    readonly module: string | undefined,
    private readonly fields: LogFields,
  ) {}

  debug(msg: string, fields?: LogFields): void {
    this.log('debug', msg, fields);
  }
  info(msg: string, fields?: LogFields): void {
    this.log('info', msg, fields);
  }
  warn(msg: string, fields?: LogFields): void {
    this.log('warn', msg, fields);
  }
  error(msg: string, fields?: LogFields): void {
    this.log('error', msg, fields);
  }

  isEnabled(level: LogLevel): boolean {
    return (this.file !== undefined && RANK[level] >= this.minRank) || (this.module !== undefined && isTraceEnabled(this.module));
  }

  child(fields: LogFields, module?: string): Logger {
    return new JsonLogger(this.file, this.minRank, module ?? this.module, { ...this.fields, ...fields });
  }

  private log(level: LogLevel, msg: string, fields: LogFields | undefined): void {
    const toFile = this.file !== undefined && RANK[level] >= this.minRank;
    const toTrace = this.module !== undefined && isTraceEnabled(this.module);
    if (!toFile && !toTrace) return;
    const line = formatLine(level, msg, this.module, this.fields, fields);
    if (toFile) appendLine(this.file!, line);
    if (toTrace) writeStderr(line);
  }
}

/** One JSON line; fixed key order time, level, msg, module, then fields (call fields override logger fields). */
export function formatLine(level: LogLevel, msg: string, module: string | undefined, base: LogFields, extra?: LogFields): string {
  const record: LogFields = { time: new Date().toISOString(), level, msg };
  if (module !== undefined) record.module = module;
  for (const fields of [base, extra]) {
    if (fields === undefined) continue;
    // Fields never overwrite the envelope: a "level" field would make the line lie.
    for (const key of Object.keys(fields)) if (!ENVELOPE.has(key)) record[key] = fields[key];
  }
  try {
    return `${JSON.stringify(record, jsonReplacer)}\n`;
  } catch {
    // A circular structure in the fields: keep the line, lose the fields.
    return `${JSON.stringify({ time: record.time, level, msg, module, fieldsError: 'fields not serialisable' })}\n`;
  }
}

function jsonReplacer(_key: string, value: unknown): unknown {
  if (typeof value === 'bigint') return value.toString();
  if (value instanceof Error) {
    const e = value as Error & { code?: unknown; errno?: unknown; details?: unknown };
    const out: LogFields = { name: e.name, message: e.message };
    if (e.code !== undefined) out.code = e.code;
    if (e.errno !== undefined) out.errno = e.errno;
    if (e.cause !== undefined) out.cause = e.cause;
    return out;
  }
  return value;
}

// One descriptor per file for the life of the process: loggers and children share it.
const fds = new Map<string, number>();
const failedFiles = new Set<string>();

/** Opens for appending; creates the directory only when it is missing (a recursive mkdir on every call cost ~1 ms). */
function openAppend(file: string): number {
  try {
    return openSync(file, 'a', 0o640);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    mkdirSync(dirname(file), { recursive: true });
    return openSync(file, 'a', 0o640);
  }
}

function appendLine(file: string, line: string): void {
  try {
    let fd = fds.get(file);
    if (fd === undefined) {
      fd = openAppend(file);
      fds.set(file, fd);
    }
    // One write per line: with O_APPEND, lines of concurrent plugin processes never interleave.
    writeSync(fd, line);
  } catch (err) {
    // Logging must never fail a CNI call; say so once on stderr.
    if (!failedFiles.has(file)) {
      failedFiles.add(file);
      writeStderr(`log: cannot write ${file}: ${(err as Error).message}\n`);
    }
  }
}

function writeStderr(text: string): void {
  try {
    writeSync(2, text);
  } catch {
    // stderr closed: nowhere left to report to.
  }
}

/** Closes the log files (tests, daemons rotating logs); the next write reopens them. */
export function closeLogFiles(): void {
  for (const fd of fds.values()) {
    try {
      closeSync(fd);
    } catch {
      // already closed
    }
  }
  fds.clear();
  failedFiles.clear();
}

let traceRaw: string | undefined;
let traceSet: Set<string> = new Set();
let traceAll = false;

/** True when CNIKIT_TRACE names the module (or is "*" / "all"). Re-reads the variable when it changes. */
export function isTraceEnabled(module: string): boolean {
  const raw = process.env[TRACE_ENV] ?? '';
  if (raw !== traceRaw) {
    traceRaw = raw;
    traceSet = new Set(
      raw
        .split(',')
        .map((s) => s.trim())
        .filter((s) => s !== ''),
    );
    traceAll = traceSet.has('*') || traceSet.has('all');
  }
  return traceAll || traceSet.has(module);
}

/** Writes a debug line for `module` to stderr when CNIKIT_TRACE enables it. */
export function trace(module: string, msg: string, fields?: LogFields): void {
  if (!isTraceEnabled(module)) return;
  writeStderr(formatLine('debug', msg, module, {}, fields));
}
