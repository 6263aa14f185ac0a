/**
 * The single-file executables run on a machine without Node: started with an empty
 * environment and PATH=/nonexistent they answer VERSION, see the caller's argv, env and
 * stdin (in both start-up modes: with a snapshot these must not be the build's), and the
 * multi-call executable picks its program by the name it was started by.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, linkSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, symlinkSync } from 'node:fs';
import { join } from 'node:path';
import { haveTool } from '../lib';
import { buildFixtures, ROOT, runExe, type Startup } from './helpers';

const VERSION = { env: { CNI_COMMAND: 'VERSION' }, input: '{"cniVersion":"1.1.0"}' };

describe.each<[Startup]>([['codecache'], ['snapshot']])('fixtures built with %s', (startup) => {
  let bin: string;
  let scratch: string;
  beforeAll(() => {
    bin = buildFixtures(startup);
    // Beside the executables, so hard links stay on one filesystem.
    scratch = mkdtempSync(join(bin, '..', `.test-${startup}-`));
  }, 300_000);
  afterAll(() => rmSync(scratch, { recursive: true, force: true }));

  test('VERSION with no node reachable (PATH=/nonexistent, empty env)', async () => {
    for (const exe of ['fx-version', 'fx-netlink', 'fx-netlib']) {
      const r = await runExe(join(bin, exe), VERSION);
      expect({ exe, code: r.code, stderr: r.stderr }).toEqual({ exe, code: 0, stderr: '' });
      expect(JSON.parse(r.stdout)).toMatchObject({ cniVersion: '1.1.0', supportedVersions: expect.arrayContaining(['1.1.0']) });
    }
  });

  test("the program sees the caller's argv, env and stdin", async () => {
    const r = await runExe(join(bin, 'fx-version'), { args: ['a', 'b c'], env: { CNI_COMMAND: 'ADD' }, input: '{"x":1}' });
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout)).toEqual({ argv: ['a', 'b c'], argv0: join(bin, 'fx-version'), command: 'ADD', stdin: '{"x":1}' });
  });

  test('only one process is ever executed: the executable itself', async () => {
    if (!haveTool('/usr/bin/strace', 'tools/ci/setup.sh installs it; it shows every execve')) return;
    const trace = join(scratch, 'execve.trace');
    const exe = join(bin, 'fx-netlib');
    const r = spawnSync('/usr/bin/strace', ['-f', '-qq', '-e', 'trace=execve', '-o', trace, exe], {
      env: { PATH: '/nonexistent', CNI_COMMAND: 'VERSION' },
      input: '{}',
      encoding: 'utf8',
    });
    expect(r.status).toBe(0);
    const execs = readFileSync(trace, 'utf8')
      .split('\n')
      .filter((l) => l.includes('execve('));
    expect(execs).toHaveLength(1);
    expect(execs[0]).toContain(exe);
  });

  test('the multi-call executable dispatches by the name it is started by', async () => {
    const cnikit = join(bin, 'cnikit');
    const hard = join(scratch, 'fx-version');
    const soft = join(scratch, 'fx-netlink');
    if (!existsSync(hard)) linkSync(cnikit, hard);
    if (!existsSync(soft)) symlinkSync(cnikit, soft);
    expect(statSync(hard).ino).toBe(statSync(cnikit).ino);

    const byHardLink = await runExe(hard, { args: ['x'], env: { CNI_COMMAND: 'ADD' } });
    expect(JSON.parse(byHardLink.stdout)).toMatchObject({ argv: ['x'], command: 'ADD' }); // fx-version's echo
    const bySymlink = await runExe(soft, VERSION);
    expect(JSON.parse(bySymlink.stdout).supportedVersions).toEqual(['1.0.0', '1.1.0']); // fx-netlink's answer
    // argv0 alone decides, as libcni sets it to the plugin's path
    const byArgv0 = await runExe(cnikit, { ...VERSION, argv0: '/opt/cni/bin/fx-netlink' });
    expect(JSON.parse(byArgv0.stdout).supportedVersions).toEqual(['1.0.0', '1.1.0']);
    // `cnikit <program> args`: the program sees only its own arguments
    const bySubcommand = await runExe(cnikit, { args: ['fx-version', 'y'], env: { CNI_COMMAND: 'DEL' } });
    expect(JSON.parse(bySubcommand.stdout)).toMatchObject({ argv: ['y'], command: 'DEL' });
  });

  test('the multi-call executable lists its programs and refuses unknown names', async () => {
    const cnikit = join(bin, 'cnikit');
    const list = await runExe(cnikit, { args: ['--list'] });
    expect(list.stdout.split('\n').filter(Boolean)).toEqual(['fx-lazy', 'fx-netlib', 'fx-netlink', 'fx-version']);
    const unknown = await runExe(cnikit, { args: ['nope'] });
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toMatch(/programs: fx-lazy fx-netlib fx-netlink fx-version/);
  });

  test('a lazy module is compiled from an asset of its own when imported, once per process, alone or multi-call', async () => {
    const expected = {
      marker: 'fx-lazy-part: loaded from its own asset',
      loads: 1,
      // its own asset's name: bundled into the program, it would see the program's
      filename: 'lazy/tools/build/fixtures/lazy-part.ts.js',
      sameModule: true,
    };
    for (const args of [
      { exe: 'fx-lazy', args: [] },
      { exe: 'cnikit', args: ['fx-lazy'] },
    ]) {
      const r = await runExe(join(bin, args.exe), { args: args.args, env: { CNI_COMMAND: 'ADD' } });
      expect({ ...args, code: r.code, stderr: r.stderr }).toEqual({ ...args, code: 0, stderr: '' });
      expect(JSON.parse(r.stdout)).toEqual(expected);
    }
    const version = await runExe(join(bin, 'fx-lazy'), VERSION);
    expect(JSON.parse(version.stdout).cniVersion).toBe('1.1.0');
  });
});

/** The CNI plugins among the executables (daemons and tools would not answer VERSION): package.json "cnikit.cniPlugins". */
function cniPlugins(): string[] {
  const pkgs = join(ROOT, 'packages');
  return readdirSync(pkgs).flatMap((d) => {
    const f = join(pkgs, d, 'package.json');
    if (!existsSync(f)) return [];
    const pkg = JSON.parse(readFileSync(f, 'utf8')) as { cnikit?: { cniPlugins?: string[] } };
    return pkg.cnikit?.cniPlugins ?? [];
  });
}

test('dist/bin: every built CNI plugin answers VERSION without node', async () => {
  const dir = join(ROOT, 'dist/bin');
  const exes = cniPlugins();
  expect(exes).toContain('veth');
  for (const exe of exes) {
    const r = await runExe(join(dir, exe), VERSION);
    expect({ exe, code: r.code }).toEqual({ exe, code: 0 });
    expect(JSON.parse(r.stdout).supportedVersions).toContain('1.1.0');
  }
});
