#!/usr/bin/env node
// node tools/node-lab/multus-image.mjs <dir> <out.tar>
//
// The Multus thin DaemonSet's image, offline: the three programs tools/node-lab/build.sh built from the Multus
// source (never vendored) laid out where Multus's own Dockerfile (images/Dockerfile) puts them — /thin_entrypoint,
// /install_multus, and the plugins multus and passthru under /usr/src/multus-cni/bin, where install_multus copies
// them from — and
// tagged with the name its deployments/multus-daemonset.yml asks for, so that manifest applies unchanged. The
// programs are static (CGO_ENABLED=0), so the image holds nothing else. Written only when missing or older than
// the programs.
import * as fs from 'node:fs';
import * as path from 'node:path';
import { writeImage } from '../images/images.mjs';

export const MULTUS_IMAGE = 'ghcr.io/k8snetworkplumbingwg/multus-cni:snapshot';
const PROGRAMS = {
  thin_entrypoint: '/thin_entrypoint',
  install_multus: '/install_multus',
  multus: '/usr/src/multus-cni/bin/multus',
  passthru: '/usr/src/multus-cni/bin/passthru',
};

const [dir, out] = process.argv.slice(2);
if (!dir || !out) throw new Error('usage: multus-image.mjs <dir with multus, install_multus, thin_entrypoint> <out.tar>');
const newest = Math.max(...Object.keys(PROGRAMS).map((p) => fs.statSync(path.join(dir, p)).mtimeMs));
if (!fs.existsSync(out) || fs.statSync(out).mtimeMs < newest) {
  const rootfs = `${out}.rootfs`;
  fs.rmSync(rootfs, { recursive: true, force: true });
  for (const [prog, at] of Object.entries(PROGRAMS)) {
    fs.mkdirSync(path.join(rootfs, path.dirname(at)), { recursive: true });
    fs.copyFileSync(path.join(dir, prog), path.join(rootfs, at));
    fs.chmodSync(path.join(rootfs, at), 0o755);
  }
  fs.mkdirSync(path.join(rootfs, 'tmp'), { mode: 0o1777 });
  writeImage(MULTUS_IMAGE, rootfs, `${out}.tmp`, ['/thin_entrypoint'], ['PATH=/']);
  fs.renameSync(`${out}.tmp`, out);
  fs.rmSync(rootfs, { recursive: true, force: true });
}
console.log(`${MULTUS_IMAGE} ${out}`);
