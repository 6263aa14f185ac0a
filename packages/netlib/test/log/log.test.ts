import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { closeLogFiles, createLogger, formatLine, isTraceEnabled, parseLogLevel, TRACE_ENV } from '../../src/log';
import { CniError } from '../../src/errors';
import { buildPlugin } from '../cni/fixtures/build';

let dir: string;
beforeEach(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'netlib-log-'));
  delete process.env[TRACE_ENV];
});
afterEach(() => {
  closeLogFiles();
  fs.rmSync(dir, { recursive: true, force: true });
  delete process.env[TRACE_ENV];
});

const lines = (file: string): Record<string, unknown>[] =>
  fs
    .readFileSync(file, 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l) as Record<string, unknown>);

describe('createLogger', () => {
  it('writes JSON lines with time, level, msg, module and fields, creating the directory', () => {
    const file = path.join(dir, 'nested/dir/veth.log');
    const log = createLogger({ file, level: 'debug', module: 'veth', fields: { containerId: 'c1' } });
    log.info('ADD done', { ifName: 'eth0', ms: 12 });
    log.debug('detail');
    const [first, second] = lines(file);
    expect(Object.keys(first!)).toEqual(['time', 'level', 'msg', 'module', 'containerId', 'ifName', 'ms']);
    expect(first).toMatchObject({ level: 'info', msg: 'ADD done', module: 'veth', containerId: 'c1', ifName: 'eth0', ms: 12 });
    expect(new Date(first!.time as string).toISOString()).toBe(first!.time);
    expect(second).toMatchObject({ level: 'debug', msg: 'detail', containerId: 'c1' });
  });

  it.each([
    ['debug', ['debug', 'info', 'warn', 'error']],
    ['info', ['info', 'warn', 'error']],
    ['warn', ['warn', 'error']],
    ['error', ['error']],
  ] as const)('level %s writes %j', (level, expected) => {
    const file = path.join(dir, `${level}.log`);
    const log = createLogger({ file, level });
    log.debug('d');
    log.info('i');
    log.warn('w');
    log.error('e');
    expect(lines(file).map((l) => l.level)).toEqual(expected);
  });

  it('level off writes nothing and creates no file', () => {
    const file = path.join(dir, 'off/x.log');
    const log = createLogger({ file, level: 'off' });
    log.error('nope');
    expect(log.isEnabled('error')).toBe(false);
    expect(fs.existsSync(path.dirname(file))).toBe(false);
  });

  it('is cheap when disabled: no serialisation of the fields', () => {
    const log = createLogger({ level: 'info' }); // no file
    const fields = {
      get expensive(): never {
        throw new Error('serialised');
      },
    };
    expect(() => log.debug('x', fields)).not.toThrow();
    expect(() => log.error('x', fields)).not.toThrow();
  });

  it('child loggers add fields and share the file', () => {
    const file = path.join(dir, 'child.log');
    const root = createLogger({ file, fields: { plugin: 'veth' } });
    root.child({ containerId: 'c2' }).warn('w', { step: 'route' });
    root.info('i');
    expect(lines(file)).toEqual([
      expect.objectContaining({ plugin: 'veth', containerId: 'c2', step: 'route', level: 'warn' }),
      expect.not.objectContaining({ containerId: 'c2' }),
    ]);
  });

  it('fields cannot overwrite the envelope', () => {
    const file = path.join(dir, 'env.log');
    createLogger({ file }).error('real', { level: 'debug', msg: 'fake', time: 'never' });
    expect(lines(file)[0]).toMatchObject({ level: 'error', msg: 'real' });
    expect(lines(file)[0]!.time).not.toBe('never');
  });

  it('serialises errors, bigints and circular fields safely', () => {
    const file = path.join(dir, 'err.log');
    const log = createLogger({ file });
    log.error('failed', { error: new CniError(7, 'bad', 'details', { cause: new Error('root') }), big: 2n ** 70n });
    const circular: Record<string, unknown> = {};
    circular.self = circular;
    log.error('circular', { circular });
    const [a, b] = lines(file);
    expect(a!.error).toEqual({ name: 'CniError', message: 'bad: details', code: 7, cause: { name: 'Error', message: 'root' } });
    expect(a!.big).toBe('1180591620717411303424');
    expect(b).toMatchObject({ msg: 'circular', fieldsError: 'fields not serialisable' });
  });

  it('appends whole lines from concurrent writers', () => {
    const file = path.join(dir, 'many.log');
    const a = createLogger({ file, fields: { w: 'a' } });
    const b = createLogger({ file, fields: { w: 'b' } });
    for (let i = 0; i < 100; i++) {
      a.info('x', { i });
      b.info('y', { i });
    }
    expect(lines(file)).toHaveLength(200);
  });

  it('rejects unknown levels', () => {
    expect(() => createLogger({ level: 'verbose' as never })).toThrow(
      'log: invalid level "verbose": expected one of debug, info, warn, error, off',
    );
    expect(parseLogLevel('warn')).toBe('warn');
  });
});

describe('tracing (CNIKIT_TRACE)', () => {
  it.each([
    ['', 'cni', false],
    ['cni', 'cni', true],
    ['lock,cni', 'cni', true],
    [' lock , cni ', 'cni', true],
    ['lock', 'cni', false],
    ['*', 'anything', true],
    ['all', 'anything', true],
  ])('CNIKIT_TRACE=%j enables %s: %s', (value, module, expected) => {
    process.env[TRACE_ENV] = value;
    expect(isTraceEnabled(module)).toBe(expected);
  });

  it('in a real process: traces and mirrored log lines go to stderr, nothing to stdout', () => {
    const bin = buildPlugin(path.join(__dirname, 'fixtures/log-child.ts'), path.join(dir, 'log-child'));
    const file = path.join(dir, 'child.log');
    const r = spawnSync(bin, [file], { env: { [TRACE_ENV]: 'lock,veth' }, encoding: 'utf8', timeout: 20_000 });
    expect(r.status).toBe(0);
    expect(r.stdout).toBe('');
    const err = r.stderr.trim().split('\n');
    const traced = err.filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(traced).toEqual([
      expect.objectContaining({ level: 'debug', msg: 'acquired', module: 'lock', path: '/x' }),
      expect.objectContaining({ level: 'debug', msg: 'd', module: 'veth', containerId: 'c1' }),
      expect.objectContaining({ level: 'warn', msg: 'w', module: 'veth', containerId: 'c1' }),
    ]);
    // The file keeps its own level; an unwritable file is reported once.
    expect(lines(file).map((l) => l.msg)).toEqual(['w']);
    expect(err.filter((l) => l.startsWith('log: cannot write /proc/version/not-a-dir/x.log'))).toHaveLength(1);
  });

  it('without CNIKIT_TRACE a process writes nothing to stdout or stderr', () => {
    const bin = buildPlugin(path.join(__dirname, 'fixtures/log-child.ts'), path.join(dir, 'log-child'));
    const r = spawnSync(bin, [path.join(dir, 'quiet.log')], { env: {}, encoding: 'utf8', timeout: 20_000 });
    expect(r.stdout).toBe('');
    expect(r.stderr).toMatch(/^log: cannot write [^\n]+\n$/);
  });

  it('a traced logger is enabled at every level', () => {
    process.env[TRACE_ENV] = 'veth';
    const log = createLogger({ level: 'error', module: 'veth' });
    expect(log.isEnabled('debug')).toBe(true);
    expect(createLogger({ level: 'error', module: 'other' }).isEnabled('debug')).toBe(false);
  });

  it('formatLine ends with a newline and has one line', () => {
    const line = formatLine('info', 'multi\nline', 'm', { a: 1 });
    expect(line.endsWith('\n')).toBe(true);
    expect(line.trim().split('\n')).toHaveLength(1);
  });
});
