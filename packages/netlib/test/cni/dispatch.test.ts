import { spawnSync } from 'node:child_process';
import * as path from 'node:path';
import { CniError, TransientError } from '../../src/errors';
import { runPlugin, type CmdArgs, type PluginHandlers, type PluginOptions } from '../../src/cni/dispatch';
import { SUPPORTED_VERSIONS } from '../../src/cni/version';
import type { Result } from '../../src/cni/result';
import { useBuiltFixture } from './fixtures/build';

const ENV = {
  CNI_CONTAINERID: 'c1',
  CNI_NETNS: '/var/run/netns/c1',
  CNI_IFNAME: 'eth0',
  CNI_ARGS: 'IgnoreUnknown=1;K8S_POD_NAME=web',
  CNI_PATH: '/opt/cni/bin',
};
const conf = (v: string, extra: object = {}): string => JSON.stringify({ cniVersion: v, name: 'net1', type: 'test', ...extra });

const RESULT: Result = {
  cniVersion: '1.1.0',
  interfaces: [{ name: 'eth0', mac: 'aa:bb:cc:dd:ee:ff', mtu: 1500, sandbox: '/var/run/netns/c1' }],
  ips: [{ address: '10.1.0.5/24', gateway: '10.1.0.1', interface: 0 }],
  routes: [{ dst: '0.0.0.0/0', gw: '10.1.0.1' }],
};

function handlers(calls: CmdArgs[] = [], overrides: Partial<PluginHandlers> = {}): PluginHandlers {
  return {
    add: (a) => {
      calls.push(a);
      return RESULT;
    },
    del: (a) => {
      calls.push(a);
    },
    check: (a) => {
      calls.push(a);
    },
    gc: (a) => {
      calls.push(a);
    },
    status: (a) => {
      calls.push(a);
    },
    ...overrides,
  };
}
const OPTS: PluginOptions = { about: 'test plugin v1' };

async function run(command: string | undefined, stdin: string, opts: { env?: object; h?: PluginHandlers; o?: PluginOptions } = {}) {
  const out = await runPlugin(opts.h ?? handlers(), opts.o ?? OPTS, { env: { ...ENV, CNI_COMMAND: command, ...opts.env }, stdin });
  return { ...out, json: out.stdout ? (JSON.parse(out.stdout) as Record<string, unknown>) : undefined };
}

describe('runPlugin: VERSION', () => {
  it('prints the supported versions in the version asked for', async () => {
    const out = await run('VERSION', '{"cniVersion":"1.0.0"}');
    expect(out.exitCode).toBe(0);
    expect(out.json).toEqual({ cniVersion: '1.0.0', supportedVersions: [...SUPPORTED_VERSIONS] });
  });
  it.each(['', 'garbage', '{"cniVersion":"9.9.9"}'])('answers with the newest version for stdin %j', async (stdin) => {
    const out = await run('VERSION', stdin);
    expect(out.exitCode).toBe(0);
    expect(out.json).toEqual({ cniVersion: '1.1.0', supportedVersions: [...SUPPORTED_VERSIONS] });
  });
  it("lists the plugin's own versions", async () => {
    const out = await run('VERSION', '{"cniVersion":"0.3.1"}', { o: { about: '', versions: ['1.0.0', '1.1.0'] } });
    expect(out.json).toEqual({ cniVersion: '1.1.0', supportedVersions: ['1.0.0', '1.1.0'] });
  });
  it('needs no other variable', async () => {
    const out = await runPlugin(handlers(), OPTS, { env: { CNI_COMMAND: 'VERSION' }, stdin: '' });
    expect(out.exitCode).toBe(0);
  });
});

describe('runPlugin: environment', () => {
  it('without CNI_COMMAND prints "about" on stderr, nothing on stdout, exit 0, and never reads stdin', async () => {
    const stdin = jest.fn(() => '');
    const out = await runPlugin(handlers(), OPTS, { env: {}, stdin });
    expect(out).toEqual({
      stdout: '',
      stderr: 'test plugin v1\nCNI protocol versions supported: 0.3.0, 0.3.1, 0.4.0, 1.0.0, 1.1.0\n',
      exitCode: 0,
    });
    expect(stdin).not.toHaveBeenCalled();
  });
  it('a failing stdin read is code 5', async () => {
    const stdin = () => {
      throw new Error('EIO: i/o error, read');
    };
    const out = await runPlugin(handlers(), OPTS, { env: { ...ENV, CNI_COMMAND: 'ADD' }, stdin });
    expect(JSON.parse(out.stdout)).toMatchObject({
      code: 5,
      msg: 'failed to read the network config from stdin',
      details: 'EIO: i/o error, read',
    });
  });
  it('without CNI_COMMAND and without "about" is code 4', async () => {
    const out = await runPlugin(handlers(), { about: '' }, { env: {}, stdin: '' });
    expect(out.exitCode).toBe(1);
    expect(JSON.parse(out.stdout)).toMatchObject({ code: 4, msg: 'required env variables [CNI_COMMAND] missing' });
  });
  it('an unknown CNI_COMMAND is code 4', async () => {
    const out = await run('RESTART', conf('1.0.0'));
    expect(out.exitCode).toBe(1);
    expect(out.json).toMatchObject({ code: 4, msg: 'unknown CNI_COMMAND: RESTART' });
  });
  it.each([
    ['ADD', { CNI_NETNS: '', CNI_PATH: undefined }, '[CNI_NETNS,CNI_PATH]'],
    ['CHECK', { CNI_IFNAME: '' }, '[CNI_IFNAME]'],
    ['DEL', { CNI_CONTAINERID: '', CNI_IFNAME: '' }, '[CNI_CONTAINERID,CNI_IFNAME]'],
    ['GC', { CNI_PATH: '' }, '[CNI_PATH]'],
    ['STATUS', { CNI_PATH: '' }, '[CNI_PATH]'],
  ])('%s with missing variables names them (code 4) in the config version', async (command, env, names) => {
    const out = await run(command, conf('1.1.0'), { env });
    expect(out.exitCode).toBe(1);
    expect(out.json).toEqual({ cniVersion: '1.1.0', code: 4, msg: `required env variables ${names} missing`, details: expect.any(String) });
  });
  it('reports the env error in the version of the config', async () => {
    const out = await run('ADD', conf('0.4.0'), { env: { CNI_IFNAME: '' } });
    expect(out.json).toMatchObject({ cniVersion: '0.4.0', code: 4 });
  });
  it('a bad container ID is code 4', async () => {
    expect((await run('ADD', conf('1.0.0'), { env: { CNI_CONTAINERID: '../etc' } })).json).toMatchObject({ code: 4 });
  });
  it('a bad interface name is code 4', async () => {
    expect((await run('DEL', conf('1.0.0'), { env: { CNI_IFNAME: 'eth0:1' } })).json).toMatchObject({ code: 4 });
  });
  it('DEL works without a netns', async () => {
    const calls: CmdArgs[] = [];
    const out = await run('DEL', conf('1.0.0'), { env: { CNI_NETNS: '' }, h: handlers(calls) });
    expect(out).toMatchObject({ stdout: '', exitCode: 0 });
    expect(calls[0]!.netns).toBe('');
  });
  it('GC and STATUS get the empty strings libcni sends', async () => {
    for (const command of ['GC', 'STATUS']) {
      const calls: CmdArgs[] = [];
      const out = await run(command, conf('1.1.0', { 'cni.dev/valid-attachments': [] }), {
        env: { CNI_CONTAINERID: '', CNI_NETNS: '', CNI_IFNAME: '', CNI_ARGS: '' },
        h: handlers(calls),
      });
      expect(out).toMatchObject({ stdout: '', exitCode: 0 });
      expect(calls[0]).toMatchObject({ command, containerId: '', netns: '', ifName: '', args: {} });
    }
  });
});

describe('runPlugin: config', () => {
  it.each(['', '{', 'null', '[1]'])('stdin %j is code 6', async (stdin) => {
    const out = await run('ADD', stdin);
    expect(out.exitCode).toBe(1);
    expect(out.json).toMatchObject({ code: 6, msg: 'failed to decode network config' });
  });
  it('an unknown cniVersion is code 1 listing the supported versions', async () => {
    const out = await run('ADD', conf('0.2.0'));
    expect(out.json).toEqual({
      cniVersion: '1.1.0',
      code: 1,
      msg: 'incompatible CNI versions',
      details: 'config is "0.2.0", plugin supports ["0.3.0","0.3.1","0.4.0","1.0.0","1.1.0"]',
    });
  });
  it("a version outside the plugin's list is code 1", async () => {
    const out = await run('ADD', conf('0.4.0'), { o: { about: '', versions: ['1.0.0', '1.1.0'] } });
    expect(out.json).toMatchObject({ code: 1, details: 'config is "0.4.0", plugin supports ["1.0.0","1.1.0"]' });
  });
  it('a missing name is code 7', async () => {
    const out = await run('ADD', JSON.stringify({ cniVersion: '1.0.0', type: 't' }));
    expect(out.json).toMatchObject({ cniVersion: '1.0.0', code: 7, msg: 'invalid config field "name"' });
  });
  it.each(['0.3.0', '0.3.1'])('CHECK on %s is code 1 "config version does not allow CHECK"', async (v) => {
    const calls: CmdArgs[] = [];
    const out = await run('CHECK', conf(v), { h: handlers(calls) });
    expect(out.json).toMatchObject({ cniVersion: v, code: 1, msg: 'config version does not allow CHECK' });
    expect(calls).toHaveLength(0);
  });
  it.each([
    ['GC', '1.0.0'],
    ['GC', '0.4.0'],
    ['STATUS', '1.0.0'],
    ['STATUS', '0.3.1'],
  ])('%s on %s is code 1', async (command, v) => {
    const calls: CmdArgs[] = [];
    const out = await run(command, conf(v), { h: handlers(calls) });
    expect(out.json).toMatchObject({ code: 1, msg: `config version does not allow ${command}` });
    expect(calls).toHaveLength(0);
  });
  it('a plugin declaring a version netlib does not know fails loudly', async () => {
    const out = await run('ADD', conf('1.0.0'), { o: { about: '', versions: ['0.2.0', '1.0.0'] } });
    expect(out.json).toMatchObject({ code: 999 });
  });
});

describe('runPlugin: verbs', () => {
  for (const v of SUPPORTED_VERSIONS) {
    it(`[${v}] ADD prints the result converted to the config version`, async () => {
      const calls: CmdArgs[] = [];
      const out = await run('ADD', conf(v), { h: handlers(calls) });
      expect(out.exitCode).toBe(0);
      expect(out.stderr).toBe('');
      const legacy = v.startsWith('0.');
      expect(out.json).toEqual({
        cniVersion: v,
        interfaces: [legacy ? { name: 'eth0', mac: 'aa:bb:cc:dd:ee:ff', sandbox: '/var/run/netns/c1' } : RESULT.interfaces![0]],
        ips: [legacy ? { version: '4', ...RESULT.ips![0] } : RESULT.ips![0]],
        routes: RESULT.routes,
      });
      expect(calls[0]).toEqual({
        command: 'ADD',
        containerId: 'c1',
        netns: '/var/run/netns/c1',
        ifName: 'eth0',
        args: { IgnoreUnknown: '1', K8S_POD_NAME: 'web' },
        path: ['/opt/cni/bin'],
        stdin: Buffer.from(conf(v)),
        conf: JSON.parse(conf(v)),
      });
    });

    it(`[${v}] DEL prints nothing`, async () => {
      const out = await run('DEL', conf(v));
      expect(out).toMatchObject({ stdout: '', stderr: '', exitCode: 0 });
    });
  }

  it.each(['0.4.0', '1.0.0', '1.1.0'])('[%s] CHECK prints nothing on success', async (v) => {
    expect(await run('CHECK', conf(v))).toMatchObject({ stdout: '', exitCode: 0 });
  });

  it('GC and STATUS print nothing on success', async () => {
    expect(await run('GC', conf('1.1.0'))).toMatchObject({ stdout: '', exitCode: 0 });
    expect(await run('STATUS', conf('1.1.0'))).toMatchObject({ stdout: '', exitCode: 0 });
  });

  it('without a check handler CHECK is code 1; without gc/status they succeed', async () => {
    const h: PluginHandlers = { add: () => RESULT, del: () => undefined };
    expect((await run('CHECK', conf('1.0.0'), { h })).json).toMatchObject({ code: 1, msg: 'plugin does not allow CHECK' });
    expect(await run('GC', conf('1.1.0'), { h })).toMatchObject({ stdout: '', exitCode: 0 });
    expect(await run('STATUS', conf('1.1.0'), { h })).toMatchObject({ stdout: '', exitCode: 0 });
  });

  it('awaits async handlers', async () => {
    const h = handlers([], { add: async () => new Promise<Result>((r) => setTimeout(() => r(RESULT), 5)) });
    expect((await run('ADD', conf('1.1.0'), { h })).json).toMatchObject({ ips: RESULT.ips });
  });
});

describe('runPlugin: errors', () => {
  const throwing = (err: unknown) =>
    handlers([], {
      add: () => {
        throw err;
      },
      status: async () => {
        throw err;
      },
    });

  it('prints a CniError as {cniVersion, code, msg, details} on stdout, exit 1', async () => {
    const out = await run('ADD', conf('1.0.0'), { h: throwing(new CniError(3, 'container unknown', 'c1 is gone')) });
    expect(out.exitCode).toBe(1);
    expect(out.stderr).toBe('');
    expect(Object.keys(out.json!)).toEqual(['cniVersion', 'code', 'msg', 'details']);
    expect(out.json).toEqual({ cniVersion: '1.0.0', code: 3, msg: 'container unknown', details: 'c1 is gone' });
  });
  it('turns other errors into code 999 with their message', async () => {
    const out = await run('ADD', conf('1.0.0'), { h: throwing(new Error('netlink: add route 10.1.0.0/24 table 116: EEXIST')) });
    expect(out.json).toEqual({ cniVersion: '1.0.0', code: 999, msg: 'netlink: add route 10.1.0.0/24 table 116: EEXIST', details: '' });
  });
  it('turns a thrown string into code 999', async () => {
    expect((await run('ADD', conf('1.0.0'), { h: throwing('boom') })).json).toMatchObject({ code: 999, msg: 'boom' });
  });
  it('reports transient errors as code 11', async () => {
    expect((await run('ADD', conf('1.0.0'), { h: throwing(new TransientError('daemon busy')) })).json).toMatchObject({
      code: 11,
      msg: 'daemon busy',
    });
  });
  it('reports STATUS unavailability (code 50) from an async handler', async () => {
    const out = await run('STATUS', conf('1.1.0'), { h: throwing(new CniError(50, 'plugin not available', 'daemon socket missing')) });
    expect(out.json).toEqual({ cniVersion: '1.1.0', code: 50, msg: 'plugin not available', details: 'daemon socket missing' });
  });
  it('an ADD handler returning nothing is code 999', async () => {
    const h = handlers([], { add: () => undefined as unknown as Result });
    expect((await run('ADD', conf('1.0.0'), { h })).json).toMatchObject({ code: 999 });
  });
});

describe('pluginMain in a real process', () => {
  const echo = useBuiltFixture(path.join(__dirname, 'fixtures/echo-plugin.ts'));

  const exec = (env: Record<string, string>, input?: string) =>
    spawnSync(echo.bin, [], { env: { PATH: process.env.PATH, ...env }, input, encoding: 'utf8', timeout: 20_000 });

  it('answers VERSION with stdin at EOF', () => {
    const r = exec({ CNI_COMMAND: 'VERSION' }, '{"cniVersion":"1.0.0"}');
    expect(r.status).toBe(0);
    expect(JSON.parse(r.stdout)).toEqual({ cniVersion: '1.0.0', supportedVersions: [...SUPPORTED_VERSIONS] });
  });

  it('runs ADD and exits 0', () => {
    const r = exec({ ...ENV, CNI_COMMAND: 'ADD', CNI_ARGS: 'IP=10.5.0.9/16' }, conf('0.4.0'));
    expect(r.status).toBe(0);
    expect(JSON.parse(r.stdout)).toEqual({ cniVersion: '0.4.0', ips: [{ version: '4', address: '10.5.0.9/16', gateway: '10.99.0.1' }] });
  });

  it('prints the error object and exits 1', () => {
    const r = exec({ ...ENV, CNI_COMMAND: 'DEL', CNI_ARGS: 'FAIL=11' }, conf('1.0.0'));
    expect(r.status).toBe(1);
    expect(JSON.parse(r.stdout)).toEqual({ cniVersion: '1.0.0', code: 11, msg: 'told to fail with 11', details: 'details here' });
  });

  it('exits even when the handler leaves a timer running', () => {
    const r = exec({ ...ENV, CNI_COMMAND: 'DEL', CNI_ARGS: 'HANG=1' }, conf('1.0.0'));
    expect(r.status).toBe(0);
    expect(r.stdout).toBe('');
  });

  it('prints "about" on stderr without CNI_COMMAND', () => {
    const r = exec({});
    expect(r.status).toBe(0);
    expect(r.stdout).toBe('');
    expect(r.stderr).toContain('echo-plugin: a test plugin');
  });

  it('reads a config larger than a pipe buffer', () => {
    const big = conf('1.0.0', { padding: 'x'.repeat(300_000) });
    const r = exec({ ...ENV, CNI_COMMAND: 'ADD' }, big);
    expect(r.status).toBe(0);
    expect(JSON.parse(r.stdout).cniVersion).toBe('1.0.0');
  });
});

describe('start-up cost', () => {
  it('dispatching ADD with an IPv4 prevResult loads neither child_process nor ip-address', async () => {
    let cni: typeof import('../../src/cni') | undefined;
    jest.isolateModules(() => {
      const loaded = (name: string) => () => {
        throw new Error(`${name} loaded`);
      };
      jest.doMock('ip-address', loaded('ip-address'));
      jest.doMock('node:child_process', loaded('node:child_process'));
      cni = require('../../src/cni') as typeof import('../../src/cni');
    });
    try {
      const h = handlers([], { add: (a) => cni!.prevResultOf(a.conf) });
      const run = (address: string) =>
        cni!.runPlugin(h, OPTS, {
          env: { ...ENV, CNI_COMMAND: 'ADD' },
          stdin: conf('1.0.0', { prevResult: { cniVersion: '1.0.0', ips: [{ address }] } }),
        });
      expect(JSON.parse((await run('10.1.0.5/24')).stdout)).toEqual({ cniVersion: '1.0.0', ips: [{ address: '10.1.0.5/24' }] });
      // The probe works: IPv6 text does need ip-address.
      expect(JSON.parse((await run('fd00::5/64')).stdout)).toMatchObject({ code: 999, msg: 'ip-address loaded' });
    } finally {
      jest.dontMock('ip-address');
      jest.dontMock('node:child_process');
    }
  });
});
