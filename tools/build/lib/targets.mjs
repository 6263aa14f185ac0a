// Which executables to build: every workspace package declares its own in
// package.json as "cnikit": {"executables": {"<name>": "src/cmd/<name>.ts"}}, so adding
// a plugin never means editing the build tooling.
import * as fs from 'node:fs';
import * as path from 'node:path';

const NAME = /^[a-z0-9][a-z0-9._-]*$/;
/** The multi-call executable's own name; no program may take it. */
export const MULTICALL = 'cnikit';

/**
 * `cni`: listed in the package's "cnikit.cniPlugins" (or the package lists none): it belongs in
 * /opt/cni/bin and in the multi-call executable. Daemons and tools (coild, operators) are
 * deployed as containers, so they stay out of it and do not grow every node's CNI binary.
 * `tool`: declared in "cnikit.imageTools" (the install step): built only into images' executables (--unit).
 * @typedef {{ name: string, entry: string, owner: string, cni: boolean, tool?: boolean, pkg?: string }} Target
 */

/** @returns {Target[]} declared by packages/<pkg>/package.json, sorted by name. */
export function workspaceTargets(root) {
  const pkgsDir = path.join(root, 'packages');
  const out = [];
  for (const dir of fs.readdirSync(pkgsDir).sort()) {
    const manifest = path.join(pkgsDir, dir, 'package.json');
    if (!fs.existsSync(manifest)) continue;
    const pkg = JSON.parse(fs.readFileSync(manifest, 'utf8'));
    const cni = pkg.cnikit?.cniPlugins;
    out.push(
      ...fromDeclaration(pkg.cnikit?.executables ?? {}, path.join(pkgsDir, dir), manifest).map((t) => ({
        ...t,
        cni: !Array.isArray(cni) || cni.includes(t.name),
        tool: false,
        pkg: dir,
      })),
      // Programs only images carry (inside their multi-call executable): never built on their own.
      ...fromDeclaration(pkg.cnikit?.imageTools ?? {}, path.join(pkgsDir, dir), manifest).map((t) => ({
        ...t,
        cni: false,
        tool: true,
        pkg: dir,
      })),
    );
  }
  return checked(out);
}

/** @returns {Target[]} the throwaway entries under tools/build/fixtures/ (tests and measurements). */
export function fixtureTargets(root) {
  const dir = path.join(root, 'tools', 'build', 'fixtures');
  const manifest = path.join(dir, 'executables.json');
  const decl = JSON.parse(fs.readFileSync(manifest, 'utf8')).executables ?? {};
  return checked(fromDeclaration(decl, dir, manifest).map((t) => ({ ...t, cni: true })));
}

/**
 * Modules that travel in an executable as SEA assets of their own, compiled only when a program
 * import()s them (lib/lazy.mjs): what a rarely taken path needs and every start would otherwise pay
 * for, such as a cloud SDK behind `doctor node --cloud`. The package owning a module declares it,
 * "cnikit": {"lazyModules": ["src/cloud.ts"]}; the fixtures in their executables.json.
 * @returns {{ file: string, pkg?: string }[]} absolute paths of the declared modules, with the package
 *   directory declaring each (none for fixtures).
 */
export function lazyModules(root, fixtures) {
  const manifests = fixtures
    ? [{ file: path.join(root, 'tools', 'build', 'fixtures', 'executables.json'), key: (m) => m.lazyModules }]
    : fs
        .readdirSync(path.join(root, 'packages'))
        .map((d) => ({ file: path.join(root, 'packages', d, 'package.json'), pkg: d, key: (m) => m.cnikit?.lazyModules }))
        .filter((m) => fs.existsSync(m.file));
  return manifests.flatMap(({ file, pkg, key }) => {
    const list = key(JSON.parse(fs.readFileSync(file, 'utf8'))) ?? [];
    if (!Array.isArray(list) || list.some((f) => typeof f !== 'string')) throw new Error(`${file}: lazyModules must be a list of paths`);
    return list.map((f) => {
      const abs = path.resolve(path.dirname(file), f);
      if (!fs.existsSync(abs)) throw new Error(`${file}: lazy module ${f} not found`);
      return { file: abs, ...(pkg ? { pkg } : {}) };
    });
  });
}

function fromDeclaration(decl, baseDir, manifest) {
  return Object.entries(decl).map(([name, rel]) => {
    if (!NAME.test(name) || name === MULTICALL) throw new Error(`${manifest}: bad executable name ${JSON.stringify(name)}`);
    if (typeof rel !== 'string') throw new Error(`${manifest}: executable ${name}: entry must be a path string`);
    return { name, entry: path.resolve(baseDir, rel), owner: manifest };
  });
}

function checked(targets) {
  const seen = new Map();
  for (const t of targets) {
    if (seen.has(t.name)) throw new Error(`executable ${t.name} declared twice: ${seen.get(t.name)} and ${t.owner}`);
    seen.set(t.name, t.owner);
  }
  return targets.sort((a, b) => a.name.localeCompare(b.name));
}
