// The node installer on a temp "host": binary copy, conflist rewrite, idempotence, backup and uninstall.
import * as fs from 'node:fs';
import * as path from 'node:path';
import { install, uninstall } from '../src/installer';
import { tmpDir } from './support';

const CONFLIST = {
  cniVersion: '1.0.0',
  name: 'k8s-pod-network',
  plugins: [
    { type: 'ptp', mtu: 1460, ipam: { type: 'host-local', ranges: [[{ subnet: '10.64.0.0/24' }]], routes: [{ dst: '0.0.0.0/0' }] } },
    { type: 'portmap', capabilities: { portMappings: true } },
  ],
};
const IPAM = { kubeconfig: '/etc/cni/net.d/gcp-ipam.kubeconfig', pool: 'ippool-default', project: 'test-project', zone: 'europe-west1-b' };

function host(): { dir: string; bin: string; conf: string; binary: string } {
  const dir = tmpDir('gcp-ipam-inst-');
  const conf = path.join(dir, 'net.d');
  fs.mkdirSync(conf);
  fs.writeFileSync(path.join(conf, '10-containerd-net.conflist'), JSON.stringify(CONFLIST, null, 2));
  fs.writeFileSync(path.join(conf, '99-other.conflist'), JSON.stringify({ ...CONFLIST, name: 'other' }));
  const binary = path.join(dir, 'gcp-ipam-src');
  fs.writeFileSync(binary, '#!/bin/sh\necho v1\n');
  return { dir, bin: path.join(dir, 'bin'), conf, binary };
}

test('install copies the binary, rewrites only the first conflist ipam, keeps a backup; a second run changes nothing', () => {
  const h = host();
  const r1 = install({ binary: h.binary, binDir: h.bin, conf: h.conf, ipam: IPAM });
  expect(r1).toMatchObject({ binaryCopied: true, conflistChanged: true, pluginsRewritten: ['ptp'] });
  expect(r1.conflist).toBe(path.join(h.conf, '10-containerd-net.conflist'));
  expect(fs.statSync(path.join(h.bin, 'gcp-ipam')).mode & 0o777).toBe(0o755);
  const after = JSON.parse(fs.readFileSync(r1.conflist, 'utf8'));
  expect(after.plugins[0]).toEqual({ ...CONFLIST.plugins[0], ipam: { ...IPAM, type: 'gcp-ipam' } });
  expect(after.plugins[1]).toEqual(CONFLIST.plugins[1]);
  expect(JSON.parse(fs.readFileSync(r1.backup, 'utf8'))).toEqual(CONFLIST);
  expect(JSON.parse(fs.readFileSync(path.join(h.conf, '99-other.conflist'), 'utf8')).plugins[0].ipam.type).toBe('host-local');
  const mtime = fs.statSync(r1.conflist).mtimeMs;
  const r2 = install({ binary: h.binary, binDir: h.bin, conf: h.conf, ipam: IPAM });
  expect(r2).toMatchObject({ binaryCopied: false, conflistChanged: false });
  expect(fs.statSync(r1.conflist).mtimeMs).toBe(mtime);
  expect(JSON.parse(fs.readFileSync(r1.backup, 'utf8'))).toEqual(CONFLIST); // the backup stays the original
  // a new binary and new settings: both updated, backup still the pre-install original
  fs.writeFileSync(h.binary, '#!/bin/sh\necho v2\n');
  const r3 = install({ binary: h.binary, binDir: h.bin, conf: h.conf, ipam: { ...IPAM, pool: 'ippool-2' } });
  expect(r3).toMatchObject({ binaryCopied: true, conflistChanged: true });
  expect(fs.readFileSync(path.join(h.bin, 'gcp-ipam'), 'utf8')).toContain('v2');
  expect(JSON.parse(fs.readFileSync(r1.backup, 'utf8'))).toEqual(CONFLIST);
  expect(uninstall({ binDir: h.bin, conf: h.conf })).toEqual({ restored: true });
  expect(JSON.parse(fs.readFileSync(r1.conflist, 'utf8'))).toEqual(CONFLIST);
  expect(fs.existsSync(path.join(h.bin, 'gcp-ipam'))).toBe(false);
  expect(fs.existsSync(r1.backup)).toBe(false);
});

test('replaceType limits the rewrite; broken or missing conflists are reported', () => {
  const h = host();
  const r = install({ binary: h.binary, binDir: h.bin, conf: h.conf, ipam: IPAM, replaceType: 'static' });
  expect(r.conflistChanged).toBe(false);
  fs.writeFileSync(path.join(h.conf, '10-containerd-net.conflist'), '{ not json');
  expect(() => install({ binary: h.binary, binDir: h.bin, conf: h.conf, ipam: IPAM })).toThrow(/is not JSON/);
  expect(() => install({ binary: h.binary, binDir: h.bin, conf: path.join(h.dir, 'nope'), ipam: IPAM })).toThrow(/does not exist/);
  const empty = tmpDir();
  expect(() => install({ binary: h.binary, binDir: h.bin, conf: empty, ipam: IPAM })).toThrow(/no \*\.conflist/);
});
