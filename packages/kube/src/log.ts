/**
 * The kit logs through a small Logger interface: netlib's createLogger() fits it, and so does any object with
 * these four methods. Without one, lines go to stderr as JSON only when CNIKIT_TRACE names the module
 * ("kube", "kube.informer", ...) or is "*" / "all", like netlib's tracing.
 */
export type LogFields = Record<string, unknown>;

export interface Logger {
  debug(msg: string, fields?: LogFields): void;
  info(msg: string, fields?: LogFields): void;
  warn(msg: string, fields?: LogFields): void;
  error(msg: string, fields?: LogFields): void;
}

function traced(module: string): boolean {
  const raw = process.env.CNIKIT_TRACE ?? '';
  if (raw === '') return false;
  const names = raw.split(',').map((s) => s.trim());
  return names.includes('*') || names.includes('all') || names.includes(module) || names.includes(module.split('.')[0]!);
}

function errorReplacer(_key: string, value: unknown): unknown {
  if (value instanceof Error) {
    const e = value as Error & { code?: unknown };
    return { name: e.name, message: e.message, ...(e.code !== undefined ? { code: e.code } : {}) };
  }
  return value;
}

/**
 * The default logger of a kit module: JSON lines on stderr. Warnings and errors are always written (an
 * outage or a failed clean-up must show in a daemon's log without anyone knowing a switch); debug and info
 * only while CNIKIT_TRACE enables the module.
 */
export function traceLogger(module: string, base: LogFields = {}): Logger {
  const write = (level: string, msg: string, fields?: LogFields): void => {
    if ((level === 'debug' || level === 'info') && !traced(module)) return;
    const line = JSON.stringify({ time: new Date().toISOString(), level, msg, module, ...base, ...fields }, errorReplacer);
    process.stderr.write(`${line}\n`);
  };
  return {
    debug: (m, f) => write('debug', m, f),
    info: (m, f) => write('info', m, f),
    warn: (m, f) => write('warn', m, f),
    error: (m, f) => write('error', m, f),
  };
}
