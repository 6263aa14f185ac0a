#!/usr/bin/env node
// npm run images -- [family ...] [--out DIR]
//
// Builds one OCI image archive per plugin family, offline (no registry, no container engine): the family's
// programs, daemons and the install step (packages/install) in ONE multi-call Node executable
// (tools/build/sea.mjs --unit), a link per program name, and the shared libraries the Node runtime loads
// (from ldd), in a single layer `FROM scratch`. Written to dist/images/<family>.tar (an OCI image layout in a
// tar, named docker.io/cnikit/<family>:<version>), ready for `ctr -n k8s.io images import` or `podman load`.
// docs/images.md says what each image holds and how its manifests use it.
import { execFileSync } from 'node:child_process';
import * as crypto from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { parseArgs } from 'node:util';
import { workspaceTargets } from '../build/lib/targets.mjs';

const root = path.resolve(import.meta.dirname, '..', '..');
const version = JSON.parse(fs.readFileSync(path.join(root, 'package.json'), 'utf8')).version;

/** family -> the packages whose executables it carries; `cni` are linked into the node's CNI bin dir. */
export const FAMILIES = {
  coil: { packages: ['coil'], cni: ['coil'] },
  'veth-router': { packages: ['veth', 'router'], cni: ['veth', 'router'] },
  terway: { packages: ['terway'], cni: ['terway'] },
  'gcp-ipam': { packages: ['gcp-ipam'], cni: ['gcp-ipam'] },
  'cilium-eni-ipam': { packages: ['cilium-eni-ipam'], cni: ['cilium-eni-ipam'] },
};
export const imageName = (family) => `docker.io/cnikit/${family}:${version}`;

const log = (m) => process.stderr.write(`[images] ${m}\n`);

const sha256 = (file) => crypto.createHash('sha256').update(fs.readFileSync(file)).digest('hex');

/** The programs of a family's executable: every executable of its packages, and the image tools. */
function programsOf(family) {
  const targets = workspaceTargets(root);
  const progs = targets.filter((t) => FAMILIES[family].packages.includes(t.pkg) && !t.tool).map((t) => t.name);
  for (const c of FAMILIES[family].cni) if (!progs.includes(c)) throw new Error(`${family}: ${c} is not a declared executable`);
  return [...progs, ...targets.filter((t) => t.tool).map((t) => t.name)];
}

/** Shared libraries a dynamically linked executable needs, as ldd resolves them on this machine. */
function sharedLibraries(exe) {
  const out = execFileSync('ldd', [exe], { encoding: 'utf8' });
  const libs = [];
  for (const line of out.split('\n')) {
    const m = /=>\s*(\/\S+)/.exec(line) ?? /^\s*(\/\S+)\s+\(/.exec(line);
    if (m) libs.push(m[1]);
  }
  return libs;
}

function stageRootfs(family, exe, programs, dir) {
  fs.rmSync(dir, { recursive: true, force: true });
  const bin = path.join(dir, 'usr', 'local', 'bin');
  fs.mkdirSync(bin, { recursive: true });
  const name = path.basename(exe);
  fs.copyFileSync(exe, path.join(bin, name));
  fs.chmodSync(path.join(bin, name), 0o755);
  for (const p of programs) fs.symlinkSync(name, path.join(bin, p));
  for (const lib of sharedLibraries(exe)) {
    // Under the path the dynamic loader looks for (the name ldd printed), with the real file's content.
    fs.mkdirSync(path.join(dir, path.dirname(lib)), { recursive: true });
    fs.copyFileSync(fs.realpathSync(lib), path.join(dir, lib));
  }
  fs.mkdirSync(path.join(dir, 'tmp'));
  fs.chmodSync(path.join(dir, 'tmp'), 0o1777);
  // CNI_NETNS paths are /var/run/netns/... (containerd's default): a daemon entering them needs /var/run -> /run.
  fs.mkdirSync(path.join(dir, 'var'));
  fs.symlinkSync('../run', path.join(dir, 'var', 'run'));
  fs.mkdirSync(path.join(dir, 'etc'));
  fs.writeFileSync(path.join(dir, 'etc', 'passwd'), 'root:x:0:0:root:/:/usr/local/bin/nologin\n');
  fs.writeFileSync(path.join(dir, 'etc', 'group'), 'root:x:0:\n');
  log(`${family}: ${programs.length} programs in ${name}`);
}

/** Writes `content` as a blob of the layout; returns its descriptor. */
function blob(layout, mediaType, file) {
  const digest = sha256(file);
  const dest = path.join(layout, 'blobs', 'sha256', digest);
  fs.mkdirSync(path.dirname(dest), { recursive: true });
  fs.renameSync(file, dest);
  return { mediaType, digest: `sha256:${digest}`, size: fs.statSync(dest).size };
}

function jsonBlob(layout, mediaType, value) {
  const tmp = path.join(layout, 'tmp.json');
  fs.writeFileSync(tmp, JSON.stringify(value));
  return blob(layout, mediaType, tmp);
}

const TAR_FLAGS = ['--sort=name', '--mtime=@0', '--owner=0', '--group=0', '--numeric-owner'];

/**
 * Writes `rootfs` as a one-layer OCI image archive named `ref` (`io.containerd.image.name`, what `ctr images
 * import` tags it as) with `cmd` as its default command.
 */
export function writeImage(ref, rootfs, file, cmd, env = ['PATH=/usr/local/bin']) {
  const layout = `${file}.layout`;
  fs.rmSync(layout, { recursive: true, force: true });
  fs.mkdirSync(layout, { recursive: true });
  const layerTar = path.join(layout, 'layer.tar');
  execFileSync('tar', [...TAR_FLAGS, '-C', rootfs, '-cf', layerTar, '.']);
  const layer = blob(layout, 'application/vnd.oci.image.layer.v1.tar', layerTar);
  const config = jsonBlob(layout, 'application/vnd.oci.image.config.v1+json', {
    architecture: 'amd64',
    os: 'linux',
    created: '1970-01-01T00:00:00Z',
    config: { Env: env, Cmd: cmd },
    rootfs: { type: 'layers', diff_ids: [layer.digest] }, // uncompressed: the diff ID is the layer's digest
  });
  const manifest = jsonBlob(layout, 'application/vnd.oci.image.manifest.v1+json', {
    schemaVersion: 2,
    mediaType: 'application/vnd.oci.image.manifest.v1+json',
    config,
    layers: [layer],
  });
  fs.writeFileSync(path.join(layout, 'oci-layout'), JSON.stringify({ imageLayoutVersion: '1.0.0' }));
  fs.writeFileSync(
    path.join(layout, 'index.json'),
    JSON.stringify({
      schemaVersion: 2,
      mediaType: 'application/vnd.oci.image.index.v1+json',
      manifests: [
        {
          ...manifest,
          platform: { architecture: 'amd64', os: 'linux' },
          annotations: { 'io.containerd.image.name': ref, 'org.opencontainers.image.ref.name': ref.slice(ref.lastIndexOf(':') + 1) },
        },
      ],
    }),
  );
  const tmp = `${file}.tmp`;
  execFileSync('tar', [...TAR_FLAGS, '-C', layout, '-cf', tmp, 'oci-layout', 'index.json', 'blobs']);
  fs.renameSync(tmp, file);
  fs.rmSync(layout, { recursive: true, force: true });
  return { ref, layerBytes: layer.size };
}

export function buildImage(family, outDir = path.join(root, 'dist', 'images')) {
  if (!FAMILIES[family]) throw new Error(`unknown family ${family} (known: ${Object.keys(FAMILIES).join(', ')})`);
  const t0 = performance.now();
  const programs = programsOf(family);
  const exeName = `cnikit-${family}`;
  const binDir = path.join(outDir, 'bin');
  execFileSync(
    process.execPath,
    [path.join(root, 'tools', 'build', 'sea.mjs'), '--unit', `${exeName}=${programs.join(',')}`, '--out', binDir],
    {
      stdio: ['ignore', 'inherit', 'inherit'],
    },
  );
  const rootfs = path.join(outDir, 'work', family);
  stageRootfs(family, path.join(binDir, exeName), programs, rootfs);
  const file = path.join(outDir, `${family}.tar`);
  const { ref } = writeImage(imageName(family), rootfs, file, [`/usr/local/bin/${exeName}`]);
  fs.rmSync(rootfs, { recursive: true, force: true });
  const size = fs.statSync(file).size;
  log(
    `${family}: ${ref} -> ${path.relative(root, file)} (${(size / 1e6).toFixed(1)} MB) in ${((performance.now() - t0) / 1000).toFixed(1)} s`,
  );
  return { family, ref, file, size, programs };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { values: opt, positionals } = parseArgs({ options: { out: { type: 'string' } }, allowPositionals: true });
  const outDir = path.resolve(root, opt.out ?? path.join('dist', 'images'));
  const families = positionals.length ? positionals : Object.keys(FAMILIES);
  fs.mkdirSync(outDir, { recursive: true });
  const built = families.map((f) => buildImage(f, outDir));
  for (const b of built) console.log(`${b.ref} ${b.file} ${b.size}`);
}
