/**
 * The built binary (dist/bin/router) run the way a runtime runs it: CNI_* env vars and the config on
 * stdin, inside the node namespace. Bad input prints a CNI error object on stdout, exits non-zero and
 * changes nothing in the node or the pod; GC (CNI 1.1) removes the host objects of attachments the
 * runtime no longer lists; STATUS and VERSION answer.
 */
import {
  badCidrCases,
  chainedErrorCases,
  CNI_PATH,
  diffSnapshots,
  directRunSuite,
  ErrorCase,
  execPlugin,
  expectCniError,
  Netns,
  ping,
  PluginEnv,
  pluginPath,
  snapshot,
} from '../lib';
import { describeRouter, multusPod, routerFields, routerNode } from './helpers';

describeRouter('router binary: bad input, GC, STATUS, VERSION', () => {
  const NET1 = '172.16.50.150';
  const suite = directRunSuite(
    () => routerNode(),
    (topo, pod) => multusPod(topo, pod, { name: 'pod', overlayIP: '10.244.0.50', mac: '02:42:ac:10:32:96', net1IP: NET1 }),
  );

  const env = (over: PluginEnv = {}): PluginEnv => ({
    CNI_COMMAND: 'ADD',
    CNI_CONTAINERID: 'e2e-router-binary-0001',
    CNI_NETNS: suite.pod.path,
    CNI_IFNAME: 'net1',
    CNI_PATH,
    ...over,
  });

  /** A chained config as libcni sends it after macvlan: macvlan's result as prevResult. */
  const conf = (over: Record<string, unknown> = {}, version = '1.1.0'): Record<string, unknown> => ({
    cniVersion: version,
    name: 'mv-router-bin',
    type: 'router',
    ...routerFields(suite.topo, `${suite.logDir}/router.log`),
    prevResult: {
      cniVersion: version,
      interfaces: [{ name: 'net1', mac: '02:42:ac:10:32:96', sandbox: suite.pod.path }],
      ips: [{ address: `${NET1}/24`, gateway: suite.topo.segments[0]!.extIP4, interface: 0 }],
      routes: [{ dst: '0.0.0.0/0' }],
    },
    ...over,
  });

  const cases: ErrorCase[] = [
    ...chainedErrorCases(env, conf),
    ...badCidrCases(conf, { service_hijack_subnet: '10.96.0.0/40', overlay_hijack_subnet: '10.244.0.0/8' }),
    {
      name: 'missing CNI_NETNS and CNI_IFNAME',
      code: 4,
      env: () => ({ CNI_COMMAND: 'ADD', CNI_CONTAINERID: 'x1', CNI_PATH }),
      stdin: () => conf(),
      mentions: /CNI_NETNS|CNI_IFNAME/,
    },
    { name: 'reserved host_rule_table', code: 7, stdin: () => conf({ host_rule_table: 254 }), mentions: /host_rule_table/ },
    { name: 'bad overlay_interface', code: 7, stdin: () => conf({ overlay_interface: 'no/such' }), mentions: /overlay_interface/ },
    { name: 'misspelt field', code: 2, stdin: () => conf({ host_rule_tabel: 600 }), mentions: /host_rule_tabel/ },
    { name: 'overlay interface missing in the pod', code: 7, stdin: () => conf({ overlay_interface: 'eth7' }), mentions: /eth7/ },
    {
      name: 'chained interface missing in the pod',
      code: 7,
      env: () => env({ CNI_IFNAME: 'net4' }),
      stdin: () => conf(),
      mentions: /net4/,
    },
  ];

  it.each(cases.map((c) => [c.name, c] as const))('%s', async (_name, c) => {
    await expectCniError(pluginPath('router'), c, env(), suite.topo.node);
    await suite.unchanged();
  });

  it('ADD, then GC with the attachment listed keeps it, without it removes every host object', async () => {
    const { topo } = suite;
    const add = await execPlugin(pluginPath('router'), env(), conf(), topo.node);
    expect({ code: add.code, err: add.json?.msg }).toEqual({ code: 0, err: undefined });
    const added = diffSnapshots(suite.nodeBefore, await snapshot(topo.node, [NET1]));
    expect(added).toEqual(
      expect.arrayContaining([
        expect.stringMatching(new RegExp(`^routes: \\+ ${NET1.replace(/\./g, '\\.')} dev cni0 table 500 proto 158 `)),
        expect.stringMatching(/^rules: \+ -4 1000: from all lookup 500$/),
        expect.stringMatching(new RegExp(`^neigh: \\+ ${NET1.replace(/\./g, '\\.')} dev cni0 lladdr .* PERMANENT$`)),
      ]),
    );
    const gcEnv = { CNI_COMMAND: 'GC', CNI_PATH };
    const keep = await execPlugin(
      pluginPath('router'),
      gcEnv,
      { ...conf({ prevResult: undefined }), 'cni.dev/valid-attachments': [{ containerID: 'e2e-router-binary-0001', ifname: 'net1' }] },
      topo.node,
    );
    expect({ code: keep.code, out: keep.stdout }).toEqual({ code: 0, out: '' });
    expect(diffSnapshots(suite.nodeBefore, await snapshot(topo.node, [NET1]))).toEqual(added);
    const gc = await execPlugin(
      pluginPath('router'),
      gcEnv,
      { ...conf({ prevResult: undefined }), 'cni.dev/valid-attachments': [] },
      topo.node,
    );
    expect({ code: gc.code, out: gc.stdout }).toEqual({ code: 0, out: '' });
    expect(diffSnapshots(suite.nodeBefore, await snapshot(topo.node, [NET1]))).toEqual([]);
    // The pod side is DEL's: it still routes through router's tables until DEL, which then cleans it.
    const del = await execPlugin(pluginPath('router'), env({ CNI_COMMAND: 'DEL' }), conf(), topo.node);
    expect({ code: del.code, out: del.stdout }).toEqual({ code: 0, out: '' });
    await suite.unchanged();
  });

  it('concurrent ADDs and DELs of two pods (separate processes) agree on the shared host rule', async () => {
    const { topo } = suite;
    // A second pod on the same node: eth0 on cni0, net1 = macvlan of the uplink.
    const pod2 = await Netns.create('pod');
    await multusPod(topo, pod2, { name: 'pod2', overlayIP: '10.244.0.51', mac: '02:42:ac:10:32:97', net1IP: '172.16.50.151' });
    const base = await snapshot(topo.node);
    const conf2 = {
      ...conf(),
      prevResult: {
        cniVersion: '1.1.0',
        interfaces: [{ name: 'net1', mac: '02:42:ac:10:32:97', sandbox: pod2.path }],
        ips: [{ address: '172.16.50.151/24', gateway: topo.segments[0]!.extIP4, interface: 0 }],
        routes: [{ dst: '0.0.0.0/0' }],
      },
    };
    const env2 = (cmd: string): PluginEnv => env({ CNI_COMMAND: cmd, CNI_CONTAINERID: 'e2e-router-binary-0002', CNI_NETNS: pod2.path });
    const router = (e: PluginEnv, c: Record<string, unknown>) => execPlugin(pluginPath('router'), e, c, topo.node);
    const hostRules = async (): Promise<number> =>
      (await topo.node.ipJson<{ priority: number }>('rule', 'show')).filter((r) => r.priority === 1000).length;
    const ok = (rs: { code: number; stdout: string }[]): void =>
      expect(rs.map((r) => (r.code === 0 ? 'ok' : r.stdout))).toEqual(rs.map(() => 'ok'));
    for (let i = 0; i < 5; i++) {
      const adds = await Promise.all([router(env(), conf()), router(env2('ADD'), conf2)]);
      ok(adds);
      expect(await hostRules()).toBe(1);
      // one pod leaves while the other arrives, at the same time: the rule stays
      expect((await router(env({ CNI_COMMAND: 'DEL' }), conf())).code).toBe(0);
      const mixed = await Promise.all([router(env(), conf()), router(env2('DEL'), conf2)]);
      ok(mixed);
      expect(await hostRules()).toBe(1);
      await ping(topo.node, NET1);
      const dels = await Promise.all([router(env({ CNI_COMMAND: 'DEL' }), conf()), router(env2('DEL'), conf2)]);
      ok(dels);
      expect(diffSnapshots(base, await snapshot(topo.node))).toEqual([]);
    }
    await pod2.delete();
  });

  it('STATUS succeeds; VERSION lists every supported version', async () => {
    const { topo } = suite;
    const st = await execPlugin(pluginPath('router'), { CNI_COMMAND: 'STATUS', CNI_PATH }, conf({ prevResult: undefined }), topo.node);
    expect({ code: st.code, out: st.stdout }).toEqual({ code: 0, out: '' });
    const v = await execPlugin(pluginPath('router'), { CNI_COMMAND: 'VERSION' }, { cniVersion: '1.1.0' });
    expect(v.json.supportedVersions).toEqual(expect.arrayContaining(['0.3.0', '0.3.1', '0.4.0', '1.0.0', '1.1.0']));
  });
});
