/**
 * The addon cache of the executables (packages/netlib/src/native): the netlink binding is
 * written once to <cache dir>/<sha256>.node and loaded from there. It must survive many
 * first runs at once (a fresh node starting many pods), replace a broken file, and fall
 * back past directories it cannot use (read-only, noexec, writable by others). Tests that
 * need /var/cache or /run to be unusable run in a private mount namespace.
 */
import { chmodSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, truncateSync, writeFileSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildFixtures, inMountNs, NETLINK_ADDON, NETLINK_CACHE_NAME, runExe } from './helpers';

const LINKS = { CNI_COMMAND: 'LINKS' };
let exe: string;
let scratch: string;
const fresh = (name: string): string => mkdtempSync(join(scratch, `${name}-`));
const addonBytes = readFileSync(NETLINK_ADDON);

beforeAll(() => {
  exe = join(buildFixtures('codecache'), 'fx-netlink');
  scratch = mkdtempSync(join(tmpdir(), 'cnikit-addon-cache-'));
}, 300_000);
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

async function dumpLinks(env: Record<string, string>): Promise<void> {
  const r = await runExe(exe, { env: { ...LINKS, ...env } });
  expect({ code: r.code, stderr: r.stderr }).toEqual({ code: 0, stderr: '' });
  expect(JSON.parse(r.stdout).links).toContain('lo');
}

test('20 concurrent first runs on an empty cache dir all succeed, leaving one complete file', async () => {
  const dir = fresh('concurrent');
  const runs = await Promise.all(Array.from({ length: 20 }, () => runExe(exe, { env: { ...LINKS, CNIKIT_CACHE_DIR: dir } })));
  expect(runs.map((r) => r.code)).toEqual(Array(20).fill(0));
  expect(readdirSync(dir)).toEqual([NETLINK_CACHE_NAME]); // no temp file left behind
  expect(readFileSync(join(dir, NETLINK_CACHE_NAME)).equals(addonBytes)).toBe(true);
});

test.each([
  ['truncated', (f: string) => truncateSync(f, 1000)],
  ['empty', (f: string) => truncateSync(f, 0)],
  ['corrupted, same size', (f: string) => writeFileSync(f, Buffer.alloc(addonBytes.length, 0x5a))],
  [
    'a symlink to another file',
    (f: string) => {
      rmSync(f);
      writeFileSync(`${f}.other`, 'x');
      symlinkSync(`${f}.other`, f);
    },
  ],
])('a %s cache file is replaced', async (_what, spoil) => {
  const dir = fresh('broken');
  await dumpLinks({ CNIKIT_CACHE_DIR: dir });
  const file = join(dir, NETLINK_CACHE_NAME);
  spoil(file);
  await dumpLinks({ CNIKIT_CACHE_DIR: dir });
  expect(readFileSync(file).equals(addonBytes)).toBe(true);
});

test('a cache dir writable by others is not trusted: the next candidate is used', async () => {
  const open = fresh('world-writable');
  chmodSync(open, 0o777);
  const tmp = fresh('tmp');
  // /var/cache and /run made unusable, so the per-user dir under TMPDIR is the next candidate
  const r = await inMountNs(
    `
    mount -t tmpfs -o ro tmpfs /var/cache
    mount -t tmpfs -o ro tmpfs /run
    env -i PATH=/nonexistent CNI_COMMAND=LINKS CNIKIT_CACHE_DIR=${open} TMPDIR=${tmp} ${exe}
    ls ${tmp}/cnikit-0 ${open}`,
    {},
  );
  expect(r.stderr).toBe('');
  expect(r.code).toBe(0);
  expect(r.stdout).toContain(NETLINK_CACHE_NAME);
  expect(readdirSync(open)).toEqual([]);
});

test('read-only TMPDIR and CNIKIT_CACHE_DIR unset: falls back to a writable candidate (/run)', async () => {
  const ro = fresh('ro-tmp');
  const r = await inMountNs(
    `
    mount -t tmpfs -o ro tmpfs /var/cache
    mount -t tmpfs tmpfs /run
    mount -t tmpfs -o ro tmpfs ${ro}
    env -i PATH=/nonexistent CNI_COMMAND=LINKS TMPDIR=${ro} ${exe}
    ls /run/cnikit`,
    {},
  );
  expect(r.stderr).toBe('');
  expect(r.code).toBe(0);
  expect(r.stdout).toContain('"lo"');
  expect(r.stdout).toContain(NETLINK_CACHE_NAME);
});

test('a noexec cache dir (dlopen refuses it) falls back to the next candidate', async () => {
  const noexec = fresh('noexec');
  const r = await inMountNs(
    `
    mount -t tmpfs -o noexec tmpfs ${noexec}
    mount -t tmpfs tmpfs /var/cache
    env -i PATH=/nonexistent CNI_COMMAND=LINKS CNIKIT_CACHE_DIR=${noexec} ${exe}
    ls /var/cache/cnikit`,
    {},
  );
  expect(r.stderr).toBe('');
  expect(r.code).toBe(0);
  expect(r.stdout).toContain(NETLINK_CACHE_NAME);
});

test('a read-only dir that already holds the right file is used as it is', async () => {
  const baked = fresh('baked');
  mkdirSync(baked, { recursive: true });
  writeFileSync(join(baked, NETLINK_CACHE_NAME), addonBytes, { mode: 0o644 });
  const r = await inMountNs(
    `
    mount --bind ${baked} ${baked}
    mount -o remount,bind,ro ${baked}
    mount -t tmpfs -o ro tmpfs /var/cache
    mount -t tmpfs -o ro tmpfs /run
    env -i PATH=/nonexistent CNI_COMMAND=LINKS CNIKIT_CACHE_DIR=${baked} TMPDIR=/nonexistent ${exe}`,
    {},
  );
  expect({ code: r.code, stderr: r.stderr }).toEqual({ code: 0, stderr: '' });
});

test('no usable directory at all: a clear error naming every candidate', async () => {
  const ro = fresh('all-ro');
  const r = await inMountNs(
    `
    mount -t tmpfs -o ro tmpfs /var/cache
    mount -t tmpfs -o ro tmpfs /run
    mount -t tmpfs -o ro tmpfs ${ro}
    env -i PATH=/nonexistent CNI_COMMAND=LINKS CNIKIT_CACHE_DIR=${ro}/x TMPDIR=${ro} ${exe}`,
    {},
  );
  expect(r.code).not.toBe(0);
  expect(r.stderr).toMatch(/native: addon netlink: no usable cache directory/);
  for (const dir of [`${ro}/x`, '/var/cache/cnikit', '/run/cnikit', `${ro}/cnikit-0`]) expect(r.stderr).toContain(`${dir}:`);
});
