/**
 * tools/install-plugins.mjs: both install modes, idempotence, the size of a multi-call
 * install, and the example conflists.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildFixtures, NODE, ROOT, runExe } from './helpers';

let bin: string;
let prefix: string;
beforeAll(() => {
  bin = buildFixtures('codecache');
  prefix = mkdtempSync(join(tmpdir(), 'cnikit-install-'));
}, 300_000);
afterAll(() => rmSync(prefix, { recursive: true, force: true }));

function install(...args: string[]): string[] {
  const r = spawnSync(NODE, [join(ROOT, 'tools/install-plugins.mjs'), '--from', bin, ...args], { encoding: 'utf8' });
  expect(r.stderr).toBe('');
  expect(r.status).toBe(0);
  return r.stdout.trim().split('\n');
}

const PROGRAMS = ['fx-lazy', 'fx-netlib', 'fx-netlink', 'fx-version'];

test('multicall: one runtime, every plugin name a hard link to it, conflists copied; twice is a no-op', async () => {
  const dir = join(prefix, 'multi');
  const net = join(prefix, 'net.d');
  const first = install('--prefix', dir, '--mode', 'multicall', '--conf-dir', net);
  expect(first.filter((l) => l.startsWith('linked'))).toHaveLength(PROGRAMS.length);
  const runtime = statSync(join(dir, 'cnikit'));
  for (const p of PROGRAMS) expect(statSync(join(dir, p)).ino).toBe(runtime.ino);
  expect(readdirSync(net)).toContain('10-macvlan-veth.conflist');
  // the whole install occupies one executable's blocks
  expect(first.at(-1)).toMatch(
    new RegExp(`^multicall: ${PROGRAMS.length + 1} files, ${((runtime.blocks * 512) / 1e6).toFixed(1)} MB on disk$`),
  );

  const again = install('--prefix', dir, '--mode', 'multicall', '--conf-dir', net);
  expect(again.filter((l) => !l.startsWith('multicall:')).every((l) => l.startsWith('unchanged'))).toBe(true);

  const r = await runExe(join(dir, 'fx-version'), { env: { CNI_COMMAND: 'VERSION' } });
  expect(JSON.parse(r.stdout).cniVersion).toBe('1.1.0');
});

test('separate: a copy per plugin, replacing links of an earlier multicall install', () => {
  const dir = join(prefix, 'switch');
  install('--prefix', dir, '--mode', 'multicall');
  const out = install('--prefix', dir, '--mode', 'separate');
  expect(out.filter((l) => l.startsWith('installed'))).toHaveLength(PROGRAMS.length);
  const inodes = new Set(PROGRAMS.map((p) => statSync(join(dir, p)).ino));
  expect(inodes.size).toBe(PROGRAMS.length);
  expect(install('--prefix', dir, '--mode', 'separate').filter((l) => l.startsWith('installed'))).toEqual([]);
});

test('bad arguments are refused with a message', () => {
  const r = spawnSync(NODE, [join(ROOT, 'tools/install-plugins.mjs'), '--prefix', prefix, '--mode', 'both'], { encoding: 'utf8' });
  expect(r.status).toBe(2);
  expect(r.stderr).toMatch(/--mode: separate or multicall/);
});
