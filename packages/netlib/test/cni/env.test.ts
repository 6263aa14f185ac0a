import { CniCode, CniError } from '../../src/errors';
import { thrownBy } from '@cnikit/netlib-testing';
import {
  formatCniArgs,
  ignoresUnknownArgs,
  knownCniArgs,
  parseCniArgs,
  parseEnv,
  requiredEnv,
  validateContainerId,
  validateIfName,
} from '../../src/cni/env';
import type { CniCommand } from '../../src/cni/version';

const full = {
  CNI_CONTAINERID: 'abc123',
  CNI_NETNS: '/var/run/netns/x',
  CNI_IFNAME: 'eth0',
  CNI_ARGS: 'IgnoreUnknown=1;K8S_POD_NAME=web',
  CNI_PATH: '/opt/cni/bin:/usr/lib/cni',
};

const cniError = (fn: () => unknown): CniError => thrownBy(CniError, fn);

describe('parseEnv: required variables per verb', () => {
  const cases: { command: CniCommand; required: string[] }[] = [
    { command: 'ADD', required: ['CNI_CONTAINERID', 'CNI_NETNS', 'CNI_IFNAME', 'CNI_PATH'] },
    { command: 'CHECK', required: ['CNI_CONTAINERID', 'CNI_NETNS', 'CNI_IFNAME', 'CNI_PATH'] },
    { command: 'DEL', required: ['CNI_CONTAINERID', 'CNI_IFNAME'] },
    { command: 'GC', required: ['CNI_PATH'] },
    { command: 'STATUS', required: ['CNI_PATH'] },
    { command: 'VERSION', required: [] },
  ];

  it.each(cases)('$command accepts the full environment', ({ command }) => {
    const env = parseEnv({ ...full, CNI_COMMAND: command });
    expect(env.command).toBe(command);
    expect(env.path).toEqual(['/opt/cni/bin', '/usr/lib/cni']);
    expect(env.args).toEqual({ IgnoreUnknown: '1', K8S_POD_NAME: 'web' });
  });

  it.each(cases)('$command lists exactly its required variables', ({ command, required }) => {
    expect(requiredEnv(command)).toEqual(['CNI_COMMAND', ...required]);
  });

  for (const { command, required } of cases) {
    for (const name of required) {
      it.each([
        ['absent', undefined],
        ['empty', ''],
      ])(`${command} without ${name} (%s) is code 4 naming it`, (_label, value) => {
        const e = cniError(() => parseEnv({ ...full, CNI_COMMAND: command, [name]: value }));
        expect(e.code).toBe(CniCode.InvalidEnvironment);
        expect(e.msg).toBe(`required env variables [${name}] missing`);
      });
    }
  }

  it('names every missing variable in one error', () => {
    const e = cniError(() => parseEnv({ CNI_COMMAND: 'ADD' }));
    expect(e.code).toBe(4);
    expect(e.msg).toBe('required env variables [CNI_CONTAINERID,CNI_NETNS,CNI_IFNAME,CNI_PATH] missing');
  });

  it('GC and STATUS accept the empty strings libcni passes', () => {
    for (const command of ['GC', 'STATUS']) {
      const env = parseEnv({
        CNI_COMMAND: command,
        CNI_CONTAINERID: '',
        CNI_NETNS: '',
        CNI_IFNAME: '',
        CNI_ARGS: '',
        CNI_PATH: '/opt/cni/bin',
      });
      expect(env).toEqual({ command, containerId: '', netns: '', ifName: '', args: {}, path: ['/opt/cni/bin'] });
    }
  });

  it('DEL accepts an empty netns', () => {
    expect(parseEnv({ ...full, CNI_COMMAND: 'DEL', CNI_NETNS: '' }).netns).toBe('');
  });

  it.each([
    ['missing', undefined, 'required env variables [CNI_COMMAND] missing'],
    ['empty', '', 'required env variables [CNI_COMMAND] missing'],
    ['unknown', 'FROB', 'unknown CNI_COMMAND: FROB'],
    ['lower case', 'add', 'unknown CNI_COMMAND: add'],
  ])('CNI_COMMAND %s is code 4', (_label, value, msg) => {
    const e = cniError(() => parseEnv({ ...full, CNI_COMMAND: value }));
    expect(e.code).toBe(4);
    expect(e.msg).toBe(msg);
  });
});

describe('container ID', () => {
  it.each(['a', 'abc123', 'A-b_c.d', '0f1e2d', 'x'.repeat(200)])('accepts %s', (id) => {
    expect(() => validateContainerId(id)).not.toThrow();
  });
  it.each(['-abc', '_abc', '.abc', 'a b', 'a/b', 'a;b', 'ä', 'a\n'])('rejects %j with code 4 naming the value', (id) => {
    const e = cniError(() => validateContainerId(id));
    expect(e.code).toBe(4);
    expect(e.msg).toContain('CNI_CONTAINERID');
    expect(e.details).toContain(JSON.stringify(id));
  });
  it('is checked by parseEnv for ADD, DEL and CHECK only', () => {
    for (const command of ['ADD', 'DEL', 'CHECK']) {
      expect(cniError(() => parseEnv({ ...full, CNI_COMMAND: command, CNI_CONTAINERID: '-bad' })).code).toBe(4);
    }
    expect(() => parseEnv({ ...full, CNI_COMMAND: 'GC', CNI_CONTAINERID: '-bad' })).not.toThrow();
  });
});

describe('interface name', () => {
  it.each(['eth0', 'e', 'x'.repeat(15), 'net1.100', 'veth-ab_c'])('accepts %s', (name) => {
    expect(() => validateIfName(name)).not.toThrow();
  });
  it.each([
    ['', 'empty'],
    ['x'.repeat(16), 'too long'],
    ['ééééééééé', 'too long'], // 18 bytes: the kernel counts bytes
    ['.', '. or ..'],
    ['..', '. or ..'],
    ['a/b', '/ or :'],
    ['a:b', '/ or :'],
    ['a b', 'whitespace'],
    ['a\tb', 'whitespace'],
  ])('rejects %j (%s) with code 4', (name, why) => {
    const e = cniError(() => validateIfName(name));
    expect(e.code).toBe(4);
    expect(e.msg).toContain(why);
    expect(e.details).toContain(JSON.stringify(name));
  });
  it('is checked by parseEnv', () => {
    expect(cniError(() => parseEnv({ ...full, CNI_COMMAND: 'ADD', CNI_IFNAME: 'a:b' })).code).toBe(4);
  });
});

describe('CNI_ARGS', () => {
  it.each([
    ['', {}],
    ['A=1', { A: '1' }],
    ['A=1;B=2', { A: '1', B: '2' }],
    ['A=1;', { A: '1' }],
    ['A=;B=x=y', { A: '', B: 'x=y' }],
    ['A=1;A=2', { A: '2' }],
    [
      'IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0;K8S_POD_INFRA_CONTAINER_ID=abc;K8S_POD_UID=u-1',
      { IgnoreUnknown: '1', K8S_POD_NAMESPACE: 'default', K8S_POD_NAME: 'web-0', K8S_POD_INFRA_CONTAINER_ID: 'abc', K8S_POD_UID: 'u-1' },
    ],
  ])('parses %j', (raw, expected) => {
    expect(parseCniArgs(raw)).toEqual(expected);
  });

  it.each(['A', 'A=1;B', '=1', 'A=1;=2'])('rejects %j with code 4 naming the pair', (raw) => {
    const e = cniError(() => parseCniArgs(raw));
    expect(e.code).toBe(4);
    expect(e.msg).toBe('invalid CNI_ARGS');
  });

  it('round-trips through formatCniArgs', () => {
    const raw = 'IgnoreUnknown=1;K8S_POD_NAME=web;X=a=b';
    expect(formatCniArgs(parseCniArgs(raw))).toBe(raw);
  });

  it.each([
    ['1', true],
    ['true', true],
    ['TRUE', true],
    ['0', false],
    ['false', false],
  ])('IgnoreUnknown=%s means %s', (value, expected) => {
    expect(ignoresUnknownArgs({ IgnoreUnknown: value })).toBe(expected);
  });
  it('IgnoreUnknown with another value is code 4', () => {
    expect(cniError(() => ignoresUnknownArgs({ IgnoreUnknown: 'yes' })).code).toBe(4);
  });

  it('knownCniArgs picks known keys', () => {
    expect(knownCniArgs({ IP: '10.1.0.5', MAC: 'aa' }, ['IP', 'MAC', 'OTHER'])).toEqual({ IP: '10.1.0.5', MAC: 'aa' });
  });
  it('knownCniArgs rejects an unknown key with code 2 naming key and value', () => {
    const e = cniError(() => knownCniArgs({ IP: '10.1.0.5', K8S_POD_NAME: 'web' }, ['IP']));
    expect(e.code).toBe(CniCode.UnsupportedField);
    expect(e.msg).toContain('K8S_POD_NAME');
    expect(e.details).toContain('"web"');
  });
  it('knownCniArgs ignores unknown keys under IgnoreUnknown=1', () => {
    expect(knownCniArgs({ IgnoreUnknown: '1', IP: '10.1.0.5', K8S_POD_NAME: 'web' }, ['IP'])).toEqual({ IP: '10.1.0.5' });
  });
  it('knownCniArgs still rejects unknown keys under IgnoreUnknown=0', () => {
    expect(cniError(() => knownCniArgs({ IgnoreUnknown: '0', X: '1' }, ['IP'])).code).toBe(2);
  });
});
