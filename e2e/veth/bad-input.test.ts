/**
 * Bad input through the real binary (dist/bin/veth), run the way a runtime runs it: CNI_* env vars and
 * the config on stdin, inside the node namespace. Each case must print a CNI error object
 * {cniVersion, code, msg[, details]} on stdout, exit non-zero, and change nothing in the node or
 * the pod namespace.
 */
import {
  deleteAllNamespaces,
  describeWithPlugin,
  diffSnapshots,
  execPlugin,
  macvlanNode,
  MacvlanNode,
  Netns,
  NetSnapshot,
  PluginEnv,
  pluginPath,
  snapshot,
  CNI_PATH,
} from '../lib';
import { vethConf } from './helpers';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const describeVeth = describeWithPlugin('veth');

describeVeth('veth: bad input gives a CNI error and changes nothing', () => {
  let topo: MacvlanNode;
  let pod: Netns;
  let logDir: string;
  let nodeBefore: NetSnapshot;
  let podBefore: NetSnapshot;

  const env = (over: PluginEnv = {}): PluginEnv => ({
    CNI_COMMAND: 'ADD',
    CNI_CONTAINERID: 'e2e-bad-input-0001',
    CNI_NETNS: pod.path,
    CNI_IFNAME: 'eth0',
    CNI_PATH,
    ...over,
  });

  /** A well-formed chained config: macvlan's result as prevResult, the veth fields of the seed. */
  const conf = (over: Record<string, unknown> = {}): Record<string, unknown> => {
    const s = topo.segments[0]!;
    return {
      cniVersion: '1.0.0',
      name: 'mv-veth-bad',
      type: 'veth',
      ...vethConf(topo, { logFile: join(logDir, 'veth.log') }),
      prevResult: {
        cniVersion: '1.0.0',
        interfaces: [{ name: 'eth0', mac: '02:42:ac:10:32:64', sandbox: pod.path }],
        ips: [{ address: `${s.rangeStart4}/24`, gateway: s.extIP4, interface: 0 }],
        routes: [{ dst: '0.0.0.0/0' }],
      },
      ...over,
    };
  };

  beforeAll(async () => {
    topo = await macvlanNode({ ipv6: false });
    pod = await Netns.create('pod');
    // what macvlan would have left: eth0 with the prevResult's address
    await pod.ip('link', 'add', 'eth0', 'address', '02:42:ac:10:32:64', 'type', 'veth', 'peer', 'name', 'eth0peer');
    await pod.ip('addr', 'add', `${topo.segments[0]!.rangeStart4}/24`, 'dev', 'eth0');
    await pod.ip('link', 'set', 'eth0', 'up');
    logDir = mkdtempSync(join(tmpdir(), 'cnikit-e2e-veth-log-'));
    nodeBefore = await snapshot(topo.node);
    podBefore = await snapshot(pod);
  });

  afterAll(async () => {
    await deleteAllNamespaces();
    if (logDir) rmSync(logDir, { recursive: true, force: true });
  });

  afterEach(async () => {
    // whatever a case did or did not print, it must not have changed anything
    expect(diffSnapshots(nodeBefore, await snapshot(topo.node))).toEqual([]);
    expect(diffSnapshots(podBefore, await snapshot(pod))).toEqual([]);
  });

  const cases: { name: string; code: number; env?: () => PluginEnv; stdin: () => string | object; mentions?: RegExp }[] = [
    { name: 'malformed JSON', code: 6, stdin: () => '{"cniVersion": "1.0.0", "name": ' },
    { name: 'JSON that is not an object', code: 6, stdin: () => '[1, 2, 3]' },
    { name: 'unknown cniVersion', code: 1, stdin: () => conf({ cniVersion: '9.9.9' }), mentions: /9\.9\.9|version/i },
    {
      name: 'CHECK with a config version below 0.4.0',
      code: 1,
      env: () => env({ CNI_COMMAND: 'CHECK' }),
      stdin: () => conf({ cniVersion: '0.3.1', prevResult: undefined }),
    },
    { name: 'unknown CNI_COMMAND', code: 4, env: () => env({ CNI_COMMAND: 'FROB' }), stdin: () => conf(), mentions: /FROB/ },
    {
      name: 'missing CNI_CONTAINERID, CNI_NETNS and CNI_IFNAME',
      code: 4,
      env: () => ({ CNI_COMMAND: 'ADD', CNI_PATH }),
      stdin: () => conf(),
      mentions: /CNI_CONTAINERID[\s\S]*CNI_NETNS[\s\S]*CNI_IFNAME|CNI_NETNS/,
    },
    { name: 'invalid CNI_IFNAME', code: 4, env: () => env({ CNI_IFNAME: 'has/slash' }), stdin: () => conf() },
    {
      name: 'bad CIDR in overlay_hijack_subnet',
      code: 7,
      stdin: () => conf({ overlay_hijack_subnet: ['10.244.0.0/33'] }),
      mentions: /overlay_hijack_subnet/,
    },
    {
      name: 'bad CIDR in service_hijack_subnet',
      code: 7,
      stdin: () => conf({ service_hijack_subnet: ['not-a-cidr'] }),
      mentions: /service_hijack_subnet/,
    },
    {
      name: 'bad CIDR in additional_hijack_subnet',
      code: 7,
      stdin: () => conf({ additional_hijack_subnet: ['10.1.2.300/24'] }),
      mentions: /additional_hijack_subnet/,
    },
    { name: 'empty service_hijack_subnet', code: 7, stdin: () => conf({ service_hijack_subnet: [] }), mentions: /service_hijack_subnet/ },
    { name: 'migrate_route out of range', code: 7, stdin: () => conf({ migrate_route: 5 }), mentions: /migrate_route/ },
    {
      name: 'rp_filter value out of range',
      code: 7,
      stdin: () => conf({ rp_filter: { set_host: true, value: 7 } }),
      mentions: /rp_filter/,
    },
    { name: 'absent netns on ADD', code: 3, env: () => env({ CNI_NETNS: '/run/netns/cke-no-such-netns' }), stdin: () => conf() },
    { name: 'missing prevResult', code: 7, stdin: () => conf({ prevResult: undefined }), mentions: /prevResult/ },
  ];

  it.each(cases.map((c) => [c.name, c] as const))('%s', async (_name, c) => {
    const r = await execPlugin(pluginPath('veth'), c.env ? c.env() : env(), c.stdin(), topo.node);
    const where = `exit ${r.code}\nstdout: ${r.stdout}\nstderr: ${r.stderr}`;
    expect({ exitNonZero: r.code !== 0, where }).toEqual({ exitNonZero: true, where });
    expect(r.json).toEqual(expect.objectContaining({ code: c.code, msg: expect.any(String) }));
    expect(typeof r.json.cniVersion).toBe('string');
    expect(r.json.msg.length).toBeGreaterThan(0);
    if (c.mentions) expect(`${r.json.msg} ${r.json.details ?? ''}`).toMatch(c.mentions);
  });

  it('no CNI_COMMAND: the about text on stderr as skel prints it (or a code 4 error), nothing done', async () => {
    const r = await execPlugin(pluginPath('veth'), env({ CNI_COMMAND: undefined }), conf(), topo.node);
    if (r.code === 0) {
      expect({ stdout: r.stdout, stderrEmpty: r.stderr.trim() === '' }).toEqual({ stdout: '', stderrEmpty: false });
    } else {
      expect(r.json).toEqual(expect.objectContaining({ code: 4, msg: expect.stringMatching(/CNI_COMMAND/) }));
    }
  });

  it('DEL with an absent netns succeeds and prints nothing', async () => {
    const r = await execPlugin(
      pluginPath('veth'),
      env({ CNI_COMMAND: 'DEL', CNI_NETNS: '/run/netns/cke-no-such-netns' }),
      conf(),
      topo.node,
    );
    expect({ code: r.code, stdout: r.stdout }).toEqual({ code: 0, stdout: '' });
  });

  it('DEL with an empty CNI_NETNS and nothing to delete succeeds', async () => {
    const r = await execPlugin(pluginPath('veth'), env({ CNI_COMMAND: 'DEL', CNI_NETNS: '' }), conf(), topo.node);
    expect({ code: r.code, stdout: r.stdout }).toEqual({ code: 0, stdout: '' });
  });

  it('VERSION lists every supported spec version', async () => {
    const r = await execPlugin(pluginPath('veth'), { CNI_COMMAND: 'VERSION' }, { cniVersion: '1.1.0' });
    expect(r.code).toBe(0);
    expect(r.json.supportedVersions).toEqual(expect.arrayContaining(['0.3.0', '0.3.1', '0.4.0', '1.0.0', '1.1.0']));
  });
});
