/**
 * Delegation against real plugins: Debian's host-local (Go, v1.1.1: speaks
 * up to 1.0.0) and a bundled test plugin for the verbs host-local lacks.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { CniError, ConfigError, PluginNotFoundError, TransientError } from '../../src/errors';
import { rejectedWith } from '@cnikit/netlib-testing';
import { delegateAdd, delegateCheck, delegateDel, delegateGc, delegateStatus, findPlugin, type DelegateArgs } from '../../src/cni/delegate';
import type { NetConf } from '../../src/cni/conf';
import { prerequisite } from '@cnikit/netlib-testing';
import { buildPlugin } from './fixtures/build';

const HOST_LOCAL = '/usr/lib/cni/host-local';
const haveHostLocal = fs.existsSync(HOST_LOCAL);
if (!haveHostLocal) {
  // Visible in the test output rather than silently passing.
  console.warn(`${HOST_LOCAL} missing: apt-get install -y --no-install-recommends containernetworking-plugins`);
}

let dir: string;
let binDir: string;
let dataDir: string;
let echoLog: string;

beforeAll(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'netlib-delegate-'));
  binDir = path.join(dir, 'bin');
  fs.mkdirSync(binDir);
  if (haveHostLocal) fs.symlinkSync(HOST_LOCAL, path.join(binDir, 'host-local'));
  buildPlugin(path.join(__dirname, 'fixtures/echo-plugin.ts'), path.join(binDir, 'echo-ipam'));
  fs.writeFileSync(path.join(binDir, 'crashy'), '#!/bin/sh\necho "cannot open /dev/frob" >&2\nexit 2\n', { mode: 0o755 });
  fs.writeFileSync(path.join(binDir, 'garbled'), '#!/bin/sh\ncat >/dev/null\necho "not json"\n', { mode: 0o755 });
  fs.writeFileSync(path.join(binDir, 'not-executable'), '#!/bin/sh\n', { mode: 0o644 });
  echoLog = path.join(dir, 'echo.log');
});
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));
beforeEach(() => {
  dataDir = fs.mkdtempSync(path.join(dir, 'data-'));
  fs.rmSync(echoLog, { force: true });
});

function hostLocalConf(version: string, subnet = '10.77.0.0/29', extra: object = {}): NetConf {
  return {
    cniVersion: version,
    name: 'dnet',
    type: 'veth',
    ipam: { type: 'host-local', dataDir, ranges: [[{ subnet }]], routes: [{ dst: '0.0.0.0/0' }] },
    ...extra,
  };
}
const args = (containerId: string): DelegateArgs => ({
  containerId,
  netns: '/var/run/netns/x',
  ifName: 'eth0',
  args: { IgnoreUnknown: '1', K8S_POD_NAME: 'web' },
  path: ['/nonexistent', binDir],
});

const caught = (p: Promise<unknown>): Promise<CniError> => rejectedWith(CniError, p);

const maybe = prerequisite(
  haveHostLocal,
  'delegation to host-local',
  'the reference host-local plugin is missing (apt-get install containernetworking-plugins)',
)
  ? describe
  : describe.skip;

maybe('delegation to host-local', () => {
  for (const v of ['0.3.0', '0.3.1', '0.4.0', '1.0.0']) {
    it(`[${v}] ADD returns an address, gateway and routes in the 1.1.0 shape`, async () => {
      const r = await delegateAdd('host-local', hostLocalConf(v), args('c1'));
      expect(r).toEqual({
        cniVersion: v,
        ips: [{ address: '10.77.0.2/29', gateway: '10.77.0.1' }],
        routes: [{ dst: '0.0.0.0/0' }],
      });
    });
  }

  it('takes the config as raw stdin bytes too', async () => {
    const r = await delegateAdd('host-local', Buffer.from(JSON.stringify(hostLocalConf('1.0.0'))), args('c1'));
    expect(r.ips?.[0]?.address).toBe('10.77.0.2/29');
  });

  it('DEL frees the address, and a second DEL still succeeds', async () => {
    const conf = hostLocalConf('1.0.0', '10.77.0.0/30'); // one usable address: .2 (.1 is the gateway)
    expect((await delegateAdd('host-local', conf, args('c1'))).ips?.[0]?.address).toBe('10.77.0.2/30');
    expect(fs.existsSync(path.join(dataDir, 'dnet', '10.77.0.2'))).toBe(true);
    await delegateDel('host-local', conf, args('c1'));
    expect(fs.existsSync(path.join(dataDir, 'dnet', '10.77.0.2'))).toBe(false);
    await delegateDel('host-local', conf, args('c1'));
    expect((await delegateAdd('host-local', conf, args('c2'))).ips?.[0]?.address).toBe('10.77.0.2/30');
  });

  it("an exhausted range comes back as the delegate's own error object", async () => {
    const conf = hostLocalConf('1.0.0', '10.77.0.0/30');
    await delegateAdd('host-local', conf, args('c1'));
    const e = await caught(delegateAdd('host-local', conf, args('c2')));
    expect(e.code).toBe(999);
    expect(e.msg).toMatch(/no IP addresses available in range set: 10\.77\.0\.1-10\.77\.0\.2/);
  });

  it('a version the delegate does not speak comes back as its code 1 with details', async () => {
    const e = await caught(delegateAdd('host-local', hostLocalConf('1.1.0'), args('c1')));
    expect(e.code).toBe(1);
    expect(e.msg).toBe('incompatible CNI versions');
    expect(e.details).toContain('config is "1.1.0"');
  });

  it('CHECK passes for a live allocation and fails for an unknown container', async () => {
    const conf = hostLocalConf('1.0.0');
    await delegateAdd('host-local', conf, args('c1'));
    await expect(delegateCheck('host-local', conf, args('c1'))).resolves.toBeUndefined();
    const e = await caught(delegateCheck('host-local', conf, args('c-unknown')));
    expect(e.code).toBeGreaterThan(0);
  });

  it('ADD sends the config without prevResult (host-local would ignore it anyway)', async () => {
    const conf = hostLocalConf('1.0.0', '10.77.0.0/29', { prevResult: { cniVersion: '1.0.0', ips: [{ address: '10.9.9.9/32' }] } });
    expect((await delegateAdd('host-local', conf, args('c1'))).ips?.[0]?.address).toBe('10.77.0.2/29');
  });
});

describe('delegation: protocol details (bundled test plugin)', () => {
  const echoConf = (v = '1.1.0', extra: object = {}): NetConf => ({
    cniVersion: v,
    name: 'dnet',
    type: 'veth',
    ipam: { type: 'echo-ipam' },
    ...extra,
  });
  const opts = { env: { ...process.env, ECHO_LOG: '' } };
  beforeEach(() => {
    opts.env.ECHO_LOG = echoLog;
  });
  const log = (): string[] => fs.readFileSync(echoLog, 'utf8').trim().split('\n');

  it('passes CNI_ARGS, container and interface; strips prevResult on ADD only', async () => {
    const conf = echoConf('1.1.0', { prevResult: { cniVersion: '1.1.0' } });
    const r = await delegateAdd('echo-ipam', conf, { ...args('c7'), args: { IgnoreUnknown: '1', IP: '10.5.0.7/16' } }, opts);
    expect(r).toEqual({ cniVersion: '1.1.0', ips: [{ address: '10.5.0.7/16', gateway: '10.99.0.1' }] });
    await delegateDel('echo-ipam', conf, args('c7'), opts);
    expect(log()).toEqual(['ADD c7 eth0 prevResult=no', 'DEL c7 prevResult=yes']);
  });

  it('forwards CHECK, GC (with the valid attachments) and STATUS', async () => {
    const conf = echoConf('1.1.0', { 'cni.dev/valid-attachments': [{ containerID: 'c1', ifname: 'eth0' }] });
    await delegateCheck('echo-ipam', conf, args('c1'), opts);
    await delegateGc('echo-ipam', conf, { path: [binDir] }, opts);
    await delegateStatus('echo-ipam', conf, { path: [binDir] }, opts);
    expect(log()).toEqual(['CHECK c1', 'GC [{"containerID":"c1","ifname":"eth0"}]', 'STATUS']);
  });

  it('rethrows the delegate error object with the same code, msg and details', async () => {
    const e = await caught(delegateStatus('echo-ipam', echoConf(), { path: [binDir], args: { FAIL: '50' } }, opts));
    expect(e).toMatchObject({ code: 50, msg: 'told to fail with 50', details: 'details here' });
  });

  it('kills a delegate past the timeout: code 11', async () => {
    const started = Date.now();
    const e = await caught(delegateAdd('echo-ipam', echoConf(), { ...args('c1'), args: { HANG: '1' } }, { ...opts, timeoutMs: 500 }));
    expect(e).toBeInstanceOf(TransientError);
    expect(e.code).toBe(11);
    expect(Date.now() - started).toBeLessThan(5000);
  });

  it('explains a failure without an error object with its stderr', async () => {
    const e = await caught(delegateDel('crashy', echoConf(), args('c1')));
    expect(e).toMatchObject({ code: 999, msg: 'delegate crashy DEL failed', details: 'cannot open /dev/frob' });
  });

  it('a result that is not JSON is code 6', async () => {
    const e = await caught(delegateAdd('garbled', echoConf(), args('c1')));
    expect(e.code).toBe(6);
    expect(e.msg).toBe('failed to decode result of delegate garbled');
  });

  it('a missing binary names the plugin and the path searched (code 7)', async () => {
    const e = await caught(delegateAdd('host-locl', echoConf(), args('c1')));
    expect(e).toBeInstanceOf(PluginNotFoundError);
    expect(e.code).toBe(7);
    expect(e.details).toBe(`expected an executable named "host-locl" in CNI_PATH ["/nonexistent","${binDir}"]`);
  });

  it('skips files that are not executable', () => {
    expect(() => findPlugin('not-executable', [binDir])).toThrow(PluginNotFoundError);
    expect(findPlugin('crashy', ['/nonexistent', binDir])).toBe(path.join(binDir, 'crashy'));
  });

  it.each(['../bin/sh', '/bin/sh', '..', ''])('refuses the plugin name %j', async (type) => {
    const e = await caught(delegateAdd(type, echoConf(), args('c1')));
    expect(e).toBeInstanceOf(ConfigError);
  });

  it('malformed config bytes are code 6', async () => {
    expect((await caught(delegateAdd('echo-ipam', '{nope', args('c1')))).code).toBe(6);
  });
});
