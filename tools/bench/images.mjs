// Image sizes: each family's OCI archive (`npm run images`), as stored (uncompressed layer) and as a registry
// would serve it (the layer gzip-compressed, what "compressed size" means on Docker Hub and ghcr), beside a Go
// program built the same way here — the Multus thin DaemonSet image from its source (tools/node-lab/build.sh,
// multus-image.mjs) — and compressed sizes Coil's, Terway's and Cilium's registries list for linux/amd64.
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import * as zlib from 'node:zlib';
import { FAMILIES } from '../images/images.mjs';
import { workspaceTargets } from '../build/lib/targets.mjs';
import { mb, ratio, table } from './lib/measure.mjs';

export const title =
  "image sizes: our families (one Node runtime each) beside Go images; a family's install against one executable (target <= 1.2x)";
export const order = 25;

/** Compressed sizes listed by registries (linux/amd64), with where they were read. */
const PUBLISHED = [
  ['Multus 4.2.2 (bitnamilegacy/multus-cni:4.2.2, Debian base)', 110.11e6, 'hub.docker.com/r/bitnamilegacy/multus-cni/tags'],
  ['Cilium operator-generic v1.19.5 (mirror of quay.io/cilium)', 31.94e6, 'hub.docker.com/r/brinnatt/cilium-operator-generic/tags'],
];

/** Bytes of the archive's layers, gzip-compressed (level 6, as `docker push` does). */
function gzippedLayers(archive) {
  const list = execFileSync('tar', ['-tf', archive], { encoding: 'utf8' }).split('\n');
  const index = JSON.parse(execFileSync('tar', ['-xOf', archive, 'index.json'], { encoding: 'utf8' }));
  const manifestBlob = `blobs/sha256/${index.manifests[0].digest.slice(7)}`;
  const manifest = JSON.parse(execFileSync('tar', ['-xOf', archive, manifestBlob], { encoding: 'utf8' }));
  let total = 0;
  for (const layer of manifest.layers) {
    const name = `blobs/sha256/${layer.digest.slice(7)}`;
    if (!list.includes(name)) throw new Error(`${archive}: layer ${name} missing`);
    const bytes = execFileSync('tar', ['-xOf', archive, name], { maxBuffer: 1 << 30 });
    total += zlib.gzipSync(bytes, { level: 6 }).length;
  }
  return total;
}

function multusArchive(ctx) {
  const out = execFileSync('bash', [path.join(ctx.root, 'tools', 'node-lab', 'build.sh')], {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'ignore'],
  });
  const multus = /^MULTUS=(.*)$/m.exec(out)?.[1];
  if (!multus) return undefined;
  const dir = path.dirname(multus);
  const line = execFileSync(
    ctx.node,
    [path.join(ctx.root, 'tools', 'node-lab', 'multus-image.mjs'), dir, path.join(dir, 'multus-cni.tar')],
    {
      encoding: 'utf8',
    },
  );
  return line.trim().split(' ')[1];
}

export function run(ctx) {
  const out = execFileSync(ctx.node, [path.join(ctx.root, 'tools', 'images', 'images.mjs')], {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'ignore'],
  });
  const rows = out
    .trim()
    .split('\n')
    .map((line) => {
      const [ref, file] = line.split(' ');
      return [ref, 'TypeScript, one Node runtime', mb(fs.statSync(file).size), mb(gzippedLayers(file)), 'built here'];
    });
  const multus = multusArchive(ctx);
  if (multus)
    rows.push([
      'ghcr.io/k8snetworkplumbingwg/multus-cni (thin)',
      'Go, from source',
      mb(fs.statSync(multus).size),
      mb(gzippedLayers(multus)),
      'built here',
    ]);
  else rows.push(['multus-cni', 'Go', '-', '-', 'no Multus source beside the repository']);
  for (const [name, bytes, where] of PUBLISHED) rows.push([name, 'Go', '-', mb(bytes), where]);
  table(['image', 'made of', 'archive', 'layers gzip', 'source'], rows);
  familyFootprint(ctx);
}

/**
 * Issue 18: what a node installs for one family, its image's one executable, against the largest program of the
 * family built alone (the least a node could install of it) and against all of them built alone (before images
 * held one executable per family).
 */
function familyFootprint(ctx) {
  const programs = workspaceTargets(ctx.root).filter((t) => !t.tool);
  const rows = [];
  for (const [family, f] of Object.entries(FAMILIES)) {
    const exe = path.join(ctx.root, 'dist', 'images', 'bin', `cnikit-${family}`);
    const lone = programs.filter((t) => f.packages.includes(t.pkg)).map((t) => path.join(ctx.binDir, t.name));
    if (!fs.existsSync(exe) || !lone.every((l) => fs.existsSync(l))) {
      rows.push([family, '-', '-', '-', '-', `not built (npm run build, npm run images)`]);
      continue;
    }
    const sizes = lone.map((l) => fs.statSync(l).size);
    const largest = Math.max(...sizes);
    const r = fs.statSync(exe).size / largest;
    rows.push([
      family,
      mb(fs.statSync(exe).size),
      `${mb(largest)} (${path.basename(lone[sizes.indexOf(largest)])})`,
      ratio(r),
      `${mb(sizes.reduce((a, b) => a + b, 0))} (${lone.length})`,
      r <= 1.2 ? 'met' : `missed by ${ratio(r / 1.2)}`,
    ]);
  }
  console.log("\n  A family's install (issue 18: its image's executable <= 1.2x one executable of the family built alone):");
  table(['family', 'image executable', 'largest program alone', 'ratio', 'all programs alone', 'target <= 1.20x'], rows);
}
