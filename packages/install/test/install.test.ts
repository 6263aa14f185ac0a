import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { install } from '../src/install';

let dir: string;
beforeEach(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cni-install-'));
});
afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

function fixture(): { exe: string; conf: string; bin: string; net: string } {
  const exe = path.join(dir, 'cnikit-coil');
  fs.writeFileSync(exe, 'binary v1');
  const conf = path.join(dir, '10-coil.conflist');
  fs.writeFileSync(conf, JSON.stringify({ cniVersion: '1.1.0', name: 'k8s-pod-network', plugins: [{ type: 'coil' }] }));
  return { exe, conf, bin: path.join(dir, 'host', 'opt', 'cni', 'bin'), net: path.join(dir, 'host', 'etc', 'cni', 'net.d') };
}

test('copies the executable, links each plugin to it, writes the conflist, and leaves no temporary file', () => {
  const f = fixture();
  const r = install({ executable: f.exe, binDir: f.bin, programs: ['coil'], conflist: { file: f.conf, confDir: f.net } });
  expect(r.copied).toBe(true);
  expect(fs.readFileSync(path.join(f.bin, 'cnikit-coil'), 'utf8')).toBe('binary v1');
  expect(fs.statSync(path.join(f.bin, 'cnikit-coil')).mode & 0o777).toBe(0o755);
  expect(fs.readlinkSync(path.join(f.bin, 'coil'))).toBe('cnikit-coil');
  expect(JSON.parse(fs.readFileSync(path.join(f.net, '10-coil.conflist'), 'utf8')).name).toBe('k8s-pod-network');
  expect(fs.readdirSync(f.bin).sort()).toEqual(['cnikit-coil', 'coil']);
  expect(fs.readdirSync(f.net)).toEqual(['10-coil.conflist']);
});

test('a second run copies nothing; a new executable replaces the old one by rename (a running plugin keeps its inode)', () => {
  const f = fixture();
  install({ executable: f.exe, binDir: f.bin, programs: ['veth', 'router'] });
  const before = fs.statSync(path.join(f.bin, 'cnikit-coil')).ino;
  expect(install({ executable: f.exe, binDir: f.bin, programs: ['veth', 'router'] }).copied).toBe(false);
  fs.writeFileSync(f.exe, 'binary v2');
  expect(install({ executable: f.exe, binDir: f.bin, programs: ['veth', 'router'] }).copied).toBe(true);
  expect(fs.statSync(path.join(f.bin, 'cnikit-coil')).ino).not.toBe(before);
  expect(fs.readFileSync(path.join(f.bin, 'router'), 'utf8')).toBe('binary v2');
});

test('an older install as a regular file is replaced by the link', () => {
  const f = fixture();
  fs.mkdirSync(f.bin, { recursive: true });
  fs.writeFileSync(path.join(f.bin, 'coil'), 'old standalone coil');
  install({ executable: f.exe, binDir: f.bin, programs: ['coil'] });
  expect(fs.readlinkSync(path.join(f.bin, 'coil'))).toBe('cnikit-coil');
});

test('a broken conflist or a bad program name fails before anything is written', () => {
  const f = fixture();
  fs.writeFileSync(f.conf, '{"cniVersion": "1.1.0", "name": "x"');
  expect(() => install({ executable: f.exe, binDir: f.bin, programs: ['coil'], conflist: { file: f.conf, confDir: f.net } })).toThrow(
    /not JSON/,
  );
  fs.writeFileSync(f.conf, '{"cniVersion": "1.1.0", "name": "x", "plugins": []}');
  expect(() => install({ executable: f.exe, binDir: f.bin, programs: ['coil'], conflist: { file: f.conf, confDir: f.net } })).toThrow(
    /non-empty plugins/,
  );
  expect(() => install({ executable: f.exe, binDir: f.bin, programs: ['../coil'] })).toThrow(/not a file name/);
  expect(fs.existsSync(f.bin)).toBe(false);
  expect(fs.existsSync(f.net)).toBe(false);
});
