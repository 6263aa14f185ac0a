/**
 * Bad input through the real binary (dist/bin/veth), run the way a runtime runs it: CNI_* env vars and
 * the config on stdin, inside the node namespace. Each case must print a CNI error object
 * {cniVersion, code, msg[, details]} on stdout, exit non-zero, and change nothing in the node or
 * the pod namespace.
 */
import {
  badCidrCases,
  chainedErrorCases,
  CNI_PATH,
  directRunSuite,
  ErrorCase,
  execPlugin,
  expectCniError,
  macvlanNode,
  PluginEnv,
  pluginPath,
} from '../lib';
import { describeVeth, vethConf } from './helpers';

describeVeth('veth: bad input gives a CNI error and changes nothing', () => {
  const suite = directRunSuite(
    () => macvlanNode({ ipv6: false }),
    async (topo, pod) => {
      // what macvlan would have left: eth0 with the prevResult's address
      await pod.ip('link', 'add', 'eth0', 'address', '02:42:ac:10:32:64', 'type', 'veth', 'peer', 'name', 'eth0peer');
      await pod.ip('addr', 'add', `${topo.segments[0]!.rangeStart4}/24`, 'dev', 'eth0');
      await pod.ip('link', 'set', 'eth0', 'up');
    },
  );

  const env = (over: PluginEnv = {}): PluginEnv => ({
    CNI_COMMAND: 'ADD',
    CNI_CONTAINERID: 'e2e-bad-input-0001',
    CNI_NETNS: suite.pod.path,
    CNI_IFNAME: 'eth0',
    CNI_PATH,
    ...over,
  });

  /** A well-formed chained config: macvlan's result as prevResult, the veth fields of the seed. */
  const conf = (over: Record<string, unknown> = {}): Record<string, unknown> => {
    const s = suite.topo.segments[0]!;
    return {
      cniVersion: '1.0.0',
      name: 'mv-veth-bad',
      type: 'veth',
      ...vethConf(suite.topo, { logFile: `${suite.logDir}/veth.log` }),
      prevResult: {
        cniVersion: '1.0.0',
        interfaces: [{ name: 'eth0', mac: '02:42:ac:10:32:64', sandbox: suite.pod.path }],
        ips: [{ address: `${s.rangeStart4}/24`, gateway: s.extIP4, interface: 0 }],
        routes: [{ dst: '0.0.0.0/0' }],
      },
      ...over,
    };
  };

  // whatever a case did or did not print, it must not have changed anything
  afterEach(() => suite.unchanged());

  const cases: ErrorCase[] = [
    ...chainedErrorCases(env, conf),
    ...badCidrCases(conf, {
      overlay_hijack_subnet: '10.244.0.0/33',
      service_hijack_subnet: 'not-a-cidr',
      additional_hijack_subnet: '10.1.2.300/24',
    }),
    { name: 'JSON that is not an object', code: 6, stdin: () => '[1, 2, 3]' },
    {
      name: 'CHECK with a config version below 0.4.0',
      code: 1,
      env: () => env({ CNI_COMMAND: 'CHECK' }),
      stdin: () => conf({ cniVersion: '0.3.1', prevResult: undefined }),
    },
    {
      name: 'missing CNI_CONTAINERID, CNI_NETNS and CNI_IFNAME',
      code: 4,
      env: () => ({ CNI_COMMAND: 'ADD', CNI_PATH }),
      stdin: () => conf(),
      mentions: /CNI_CONTAINERID[\s\S]*CNI_NETNS[\s\S]*CNI_IFNAME|CNI_NETNS/,
    },
    { name: 'invalid CNI_IFNAME', code: 4, env: () => env({ CNI_IFNAME: 'has/slash' }), stdin: () => conf() },
    { name: 'empty service_hijack_subnet', code: 7, stdin: () => conf({ service_hijack_subnet: [] }), mentions: /service_hijack_subnet/ },
    { name: 'migrate_route out of range', code: 7, stdin: () => conf({ migrate_route: 5 }), mentions: /migrate_route/ },
    {
      name: 'rp_filter value out of range',
      code: 7,
      stdin: () => conf({ rp_filter: { set_host: true, value: 7 } }),
      mentions: /rp_filter/,
    },
  ];

  it.each(cases.map((c) => [c.name, c] as const))('%s', async (_name, c) => {
    await expectCniError(pluginPath('veth'), c, env(), suite.topo.node);
  });

  it('no CNI_COMMAND: the about text on stderr as skel prints it (or a code 4 error), nothing done', async () => {
    const r = await execPlugin(pluginPath('veth'), env({ CNI_COMMAND: undefined }), conf(), suite.topo.node);
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
      suite.topo.node,
    );
    expect({ code: r.code, stdout: r.stdout }).toEqual({ code: 0, stdout: '' });
  });

  it('DEL with an empty CNI_NETNS and nothing to delete succeeds', async () => {
    const r = await execPlugin(pluginPath('veth'), env({ CNI_COMMAND: 'DEL', CNI_NETNS: '' }), conf(), suite.topo.node);
    expect({ code: r.code, stdout: r.stdout }).toEqual({ code: 0, stdout: '' });
  });

  it('VERSION lists every supported spec version', async () => {
    const r = await execPlugin(pluginPath('veth'), { CNI_COMMAND: 'VERSION' }, { cniVersion: '1.1.0' });
    expect(r.code).toBe(0);
    expect(r.json.supportedVersions).toEqual(expect.arrayContaining(['0.3.0', '0.3.1', '0.4.0', '1.0.0', '1.1.0']));
  });
});
