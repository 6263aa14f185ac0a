/**
 * Where things are: the repository, the built plugins (dist/bin), Debian's Go reference plugins
 * (/usr/lib/cni), cnitool (installed by tools/ci/setup.sh into ~/.cache/cnikit/bin), busybox.
 */
import { accessSync, constants, existsSync } from 'node:fs';
import { prerequisite } from '@cnikit/netlib-testing';
import { homedir } from 'node:os';
import { join, resolve } from 'node:path';

export const REPO_ROOT = resolve(__dirname, '../..');
/** Our built plugins; CNIKIT_DIST_BIN points the tests at another copy (e.g. an install in /opt/cni/bin). */
export const DIST_BIN = process.env.CNIKIT_DIST_BIN ?? join(REPO_ROOT, 'dist/bin');
export const REFERENCE_PLUGINS = process.env.CNIKIT_REFERENCE_PLUGINS ?? '/usr/lib/cni';
/** CNI_PATH for every run: our plugins first, then Debian's Go reference plugins. */
export const CNI_PATH = [DIST_BIN, REFERENCE_PLUGINS].join(':');
export const IS_CI = ['1', 'true', 'yes'].includes((process.env.CI ?? '').toLowerCase());

const isExecutable = (p: string): boolean => {
  try {
    accessSync(p, constants.X_OK);
    return true;
  } catch {
    return false;
  }
};

function findOnPath(name: string): string | undefined {
  for (const dir of (process.env.PATH ?? '').split(':')) {
    if (dir && isExecutable(join(dir, name))) return join(dir, name);
  }
  return undefined;
}

/** cnitool: $CNITOOL, else the copy tools/ci/setup.sh caches, else PATH. */
export function cnitoolPath(): string {
  const candidates = [
    process.env.CNITOOL,
    join(process.env.CNIKIT_CACHE ?? join(homedir(), '.cache/cnikit'), 'bin/cnitool'),
    findOnPath('cnitool'),
  ];
  const found = candidates.find((c): c is string => !!c && isExecutable(c));
  if (!found) throw new Error('cnitool not found: run `bash tools/ci/setup.sh` (installs it into ~/.cache/cnikit/bin)');
  return found;
}

/** A statically linked busybox (Debian's busybox-static): the test image and `ping` everywhere. */
export function busyboxPath(): string {
  const found = [process.env.CNIKIT_BUSYBOX, '/usr/bin/busybox', '/bin/busybox'].find((c): c is string => !!c && isExecutable(c));
  if (!found) throw new Error('busybox not found: apt-get install busybox-static (or run tools/ci/setup.sh)');
  return found;
}

export const pluginPath = (name: string): string => join(DIST_BIN, name);
export const referencePluginPath = (name: string): string => join(REFERENCE_PLUGINS, name);
export const hasPlugin = (name: string): boolean => existsSync(pluginPath(name)) && isExecutable(pluginPath(name));

/**
 * `describe` for a suite that needs a prerequisite. When `ok` is false the suite is skipped with a message
 * saying `why`, except under CI=true, where the suite fails with that message (a missing prerequisite must
 * never turn CI green).
 */
export function describeIf(ok: boolean, what: string, why: string): jest.Describe {
  if (prerequisite(ok, `tests of ${what}`, why)) return describe;
  return describe.skip;
}

/** `describe` for a suite that needs our built executables (see describeIf). */
export function describeWithPlugin(...names: string[]): jest.Describe {
  const missing = names.filter((n) => !hasPlugin(n));
  return describeIf(
    missing.length === 0,
    `"${names.join('", "')}"`,
    `${missing.map(pluginPath).join(', ')} missing: run \`npm run build\` first`,
  );
}

/** For one test that needs a tool: true when it is there (see prerequisite: never a silent skip). */
export function haveTool(path: string, why: string): boolean {
  return prerequisite(existsSync(path), `a check that needs ${path}`, why);
}
