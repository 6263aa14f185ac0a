// The native addons an executable may need, and when it needs them. Each travels
// as the SEA asset "addon/<name>.node" plus "addon/<name>.node.sha256" (its digest,
// so the loader in packages/netlib/src/native/index.ts never hashes at run time).
import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import { createRequire } from 'node:module';
import * as path from 'node:path';

/**
 * @param {string} root workspace root
 * @returns {{ name: string, file: string, neededBy: (input: string) => boolean }[]}
 *   `neededBy` tells, for a bundle input path (relative to root, esbuild's metafile
 *   form), that the bundle can load this addon.
 */
export function addonTable(root) {
  const req = createRequire(path.join(root, 'package.json'));
  const netlinkDir = path.dirname(req.resolve('netlink/package.json'));
  return [
    {
      name: 'netlink',
      file: path.join(netlinkDir, 'prebuilds', `${process.platform}-${process.arch}`, 'node.napi.node'),
      neededBy: (input) => input.includes('node_modules/netlink/'),
    },
    {
      name: 'netns',
      file: path.join(root, 'packages', 'netlib', 'native', 'build', 'Release', 'netns.node'),
      neededBy: (input) => input === 'packages/netlib/src/native/index.ts',
    },
  ];
}

/**
 * SEA "assets" entries and their digests for the addons a bundle needs.
 * A missing addon fails the build unless `allowMissing` (then a plugin that
 * reaches it fails at run time with "this executable holds no asset").
 */
export function assetsFor(root, inputs, workDir, allowMissing, warn) {
  const assets = {};
  const digests = [];
  for (const addon of addonTable(root)) {
    if (!inputs.some(addon.neededBy)) continue;
    if (!fs.existsSync(addon.file)) {
      const msg = `addon ${addon.name} not built: ${addon.file}`;
      if (!allowMissing) throw new Error(`${msg} (run the nx build first, or pass --allow-missing-addons)`);
      warn(`${msg}; left out`);
      continue;
    }
    // A private copy: the digest and the embedded bytes must be the same file even if
    // a rebuild of the addon (node-gyp deletes its build folder first) runs meanwhile.
    const bytes = fs.readFileSync(addon.file);
    const digest = createHash('sha256').update(bytes).digest('hex');
    const copy = path.join(workDir, `${addon.name}.node`);
    fs.writeFileSync(copy, bytes);
    fs.writeFileSync(`${copy}.sha256`, digest);
    assets[`addon/${addon.name}.node`] = copy;
    assets[`addon/${addon.name}.node.sha256`] = `${copy}.sha256`;
    digests.push(`${addon.name}:${digest}`);
  }
  return { assets, digests };
}
