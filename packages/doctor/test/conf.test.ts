/**
 * `doctor conf` against real plugins: Debian 12's reference plugins (1.1.1: CNI <= 1.0.0), asked VERSION
 * exactly as libcni asks. One plugin that speaks 1.1.0 is a two-line script: what matters is its VERSION answer.
 */
import { prerequisite } from '@cnikit/netlib-testing';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { confFiles, formatReports, hasErrors, lintConfDir, lintNads, type FileReport } from '../src/conf';

const DEBIAN = '/usr/lib/cni';
const have = ['portmap', 'bridge', 'host-local'].every((p) => fs.existsSync(path.join(DEBIAN, p)));
const maybe = prerequisite(have, 'doctor conf', `Debian's CNI plugins missing in ${DEBIAN} (apt-get install containernetworking-plugins)`)
  ? describe
  : describe.skip;

let confDir: string;
let binDir: string;

beforeEach(() => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'doctor-conf-'));
  confDir = path.join(dir, 'net.d');
  binDir = path.join(dir, 'bin');
  fs.mkdirSync(confDir);
  fs.mkdirSync(binDir);
  for (const p of ['portmap', 'bridge', 'host-local']) fs.symlinkSync(path.join(DEBIAN, p), path.join(binDir, p));
  // speaks 1.1.0 (as our plugins do); prints its VERSION answer whatever it is asked
  fs.writeFileSync(
    path.join(binDir, 'modern'),
    `#!/bin/sh\necho '{"cniVersion":"1.1.0","supportedVersions":["0.3.1","0.4.0","1.0.0","1.1.0"]}'\n`,
    { mode: 0o755 },
  );
});

afterEach(() => fs.rmSync(path.dirname(confDir), { recursive: true, force: true }));

const write = (name: string, content: unknown): void =>
  fs.writeFileSync(path.join(confDir, name), typeof content === 'string' ? content : JSON.stringify(content));
const lint = (): Promise<FileReport[]> => lintConfDir({ confDir, binDirs: [binDir] });
const bridge = { type: 'bridge', bridge: 'cni0', ipam: { type: 'host-local', subnet: '10.1.0.0/24' } };
const errors = (r: FileReport): string[] => r.findings.filter((f) => f.severity === 'error').map((f) => `${f.plugin ?? ''}: ${f.msg}`);

maybe('doctor conf', () => {
  test("Debian's portmap in a 1.1.0 conflist: an error naming what it speaks and what the node will do", async () => {
    write('10-net.conflist', {
      cniVersion: '1.1.0',
      name: 'net',
      plugins: [bridge, { type: 'portmap', capabilities: { portMappings: true } }],
    });
    const [r] = await lint();
    expect(r!.used).toBe(true);
    expect(r!.plugins.map((p) => p.type)).toEqual(['bridge', 'portmap']);
    expect(r!.plugins[1]!.supportedVersions).toContain('1.0.0');
    expect(r!.plugins[1]!.supportedVersions).not.toContain('1.1.0');
    const errs = errors(r!);
    expect(errs).toHaveLength(2); // bridge is Debian's too: neither speaks 1.1.0
    expect(errs[1]).toMatch(/^portmap: speaks CNI .*1\.0\.0, not the network's 1\.1\.0: the runtime's STATUS fails/);
    expect(hasErrors([r!])).toBe(true);
  });

  test('the same chain at 1.0.0 is clean', async () => {
    write('10-net.conflist', {
      cniVersion: '1.0.0',
      name: 'net',
      plugins: [bridge, { type: 'portmap', capabilities: { portMappings: true } }],
    });
    const reports = await lint();
    expect(reports[0]!.findings).toEqual([]);
    expect(hasErrors(reports)).toBe(false);
    expect(formatReports(reports, confDir)).toMatch(
      /^\* 10-net\.conflist {2}net {2}cniVersion 1\.0\.0 {2}bridge \(1\.0\.0\) -> portmap \(1\.0\.0\)/,
    );
  });

  test('a plugin that speaks 1.1.0 in a 1.1.0 conflist is clean; a missing binary is an error', async () => {
    write('10-net.conflist', { cniVersion: '1.1.0', name: 'net', plugins: [{ type: 'modern' }, { type: 'tuning' }] });
    const [r] = await lint();
    expect(r!.plugins[0]!.supportedVersions).toContain('1.1.0');
    expect(errors(r!)).toEqual([expect.stringMatching(/^tuning: .*tuning.*: every ADD, DEL and STATUS of this network fails$/)]);
  });

  test('the runtime takes the first file that loads: a broken one is skipped, a later one is not used', async () => {
    write('05-broken.conflist', '{ "cniVersion": "1.0.0", ');
    write('10-net.conf', { cniVersion: '1.0.0', name: 'net', ...bridge });
    write('20-other.conflist', { cniVersion: '1.0.0', name: 'net', plugins: [bridge] });
    write('README.md', 'not a config');
    expect(confFiles(confDir).map((f) => path.basename(f))).toEqual(['05-broken.conflist', '10-net.conf', '20-other.conflist']);
    const [broken, used, other] = await lint();
    expect(broken!.used).toBe(false);
    expect(errors(broken!)).toEqual([expect.stringMatching(/^: not JSON/)]);
    expect(used!.used).toBe(true);
    expect(used!.findings).toEqual([]);
    expect(other!.used).toBe(false);
    expect(other!.findings.map((f) => f.msg)).toEqual([
      'not used: the runtime takes the first network by file name (10-net.conf)',
      'network name net also in 10-net.conf',
    ]);
  });

  test('missing name and version, an unknown version, a legacy version, an empty dir', async () => {
    expect(hasErrors(await lint())).toBe(true);
    expect(formatReports([], confDir)).toMatch(/no network config/);
    expect(await lintConfDir({ confDir: path.join(confDir, 'absent'), binDirs: [binDir] })).toEqual([]);
    write('10-a.conflist', { plugins: [bridge] });
    write('20-b.conflist', { cniVersion: '2.0.0', name: 'b', plugins: [bridge] });
    write('30-c.conflist', { cniVersion: '0.3.1', name: 'c', plugins: [bridge] });
    const [a, b, c] = await lint();
    expect(errors(a!)).toEqual([': network name undefined is missing or invalid', ': no cniVersion']);
    expect(errors(b!)).toEqual([': cniVersion 2.0.0 is not a CNI spec version']);
    expect(c!.used).toBe(true);
    expect(c!.findings.map((f) => `${f.severity}: ${f.msg}`)).toEqual([
      expect.stringMatching(/^warning: cniVersion 0\.3\.1: a legacy version/),
    ]);
  });

  test('NetworkAttachmentDefinitions are linted as Multus runs them on this node, with their own cniVersion', async () => {
    const nad = (name: string, cniVersion: string, plugins: unknown[]) => ({
      namespace: 'default',
      name,
      config: JSON.stringify({ cniVersion, name, plugins }),
    });
    const macvlan = { type: 'bridge', ipam: { type: 'host-local', subnet: '10.2.0.0/24' } };
    const [good, bad, empty] = await lintNads(
      [
        nad('good', '1.0.0', [macvlan, { type: 'modern' }]),
        nad('bad', '1.1.0', [macvlan, { type: 'portmap' }]),
        { namespace: 'x', name: 'empty' },
      ],
      [binDir],
    );
    expect(good!.file).toBe('NetworkAttachmentDefinition default/good');
    expect(good!.findings).toEqual([]);
    expect(errors(bad!).map((e) => e.split(':')[0])).toEqual(['bridge', 'portmap']);
    expect(empty!.findings.map((f) => f.severity)).toEqual(['warning']);
    expect(formatReports([good!, bad!], 'NADs')).toMatch(
      /^ {2}NetworkAttachmentDefinition default\/good {2}good {2}cniVersion 1\.0\.0 {2}bridge \(1\.0\.0\) -> modern \(1\.1\.0\)/,
    );
  });
});
