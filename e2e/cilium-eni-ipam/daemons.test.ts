/**
 * The built daemons (dist/bin/cilium-eni-operator, cilium-eni-agent) against a real kube-apiserver started
 * for this file and moto_server as EC2: the operator installs the CRD and runs under leader election, the
 * agent creates its CiliumNode from flags (an instance started in moto), the operator fills the node's pool
 * from EC2, and the built cilium-eni-ipam binary gets an IP from the agent over its socket, with the routing
 * set up in a "node" namespace holding the ENI link (a veth with the ENI's MAC from status.eni.enis).
 * The API is read through the kube kit's transport (requestRaw) with the cluster's admin kubeconfig.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { eventually, freePort } from '@cnikit/kube-testing';
import { startMoto, type Moto } from '@cnikit/cilium-eni-ipam-testing';
import { makeWorld, runInstances, type World } from '@cnikit/cilium-eni-ipam-testing';
import type { CiliumNode } from '../../packages/cilium-eni-ipam/src/types';
import { CNI_PATH, Netns, describeWithPlugin, execPlugin, pluginPath, run } from '../lib';
import { E2eCluster } from '../lib/cluster';

const BINARIES = ['cilium-eni-operator', 'cilium-eni-agent', 'cilium-eni-ipam'];
const describeBuilt = describeWithPlugin(...BINARIES);

const cluster = new E2eCluster('cilium-eni-e2e');
const ciliumNode = (name: string) => cluster.api<CiliumNode>('GET', `/apis/cilium.io/v2/ciliumnodes/${name}`);
/** A failure message with the daemons' logs appended. */
const withLogs = (e: unknown): never => {
  throw new Error(`${(e as Error).message}\n${cluster.logs()}`);
};

describeBuilt('cilium-eni daemons (built operator + agent, real API server, moto)', () => {
  let moto: Moto;
  let w: World;
  let instanceId: string;
  let metricsPort: number;
  const nodeName = 'eni-e2e-node1';
  const socket = path.join(cluster.work, 'agent.sock');

  beforeAll(async () => {
    moto = await startMoto();
    w = await makeWorld(moto.endpoint);
    [instanceId] = await runInstances(w, 1, 'm5.large');
    await cluster.start();
    metricsPort = await freePort();
  }, 170_000);

  afterAll(async () => {
    await cluster.stop();
    await moto?.stop();
  });

  test('bad flags: exit 2 naming the flag, before touching the cluster; --help: usage, exit 0', async () => {
    const op = await run([pluginPath('cilium-eni-operator'), '--kubeconfig', cluster.kubeconfig, '--limit-ipam-api-qps', '0']);
    expect(op.code).toBe(2);
    expect(op.stderr).toContain("cilium-eni-operator: option '--limit-ipam-api-qps <n>' argument '0' is invalid");
    const ag = await run([pluginPath('cilium-eni-agent'), '--kubeconfig', cluster.kubeconfig, '--instance-id', 'i-1']);
    expect(ag.code).toBe(2);
    expect(ag.stderr).toContain('cilium-eni-agent: --instance-id without IMDS needs --instance-type');
    const help = await run([pluginPath('cilium-eni-agent'), '--help']);
    expect(help.code).toBe(0);
    expect(help.stdout).toMatch(/Usage: cilium-eni-agent[\s\S]*--pre-allocate/);
  });

  test("operator installs the CRD and fills the pool of the agent's node from EC2; the plugin binary gets an IP", async () => {
    cluster.daemons.start(
      'cilium-eni-operator',
      [
        '--kubeconfig',
        cluster.kubeconfig,
        '--install-crd',
        '--cluster-name',
        'e2e',
        '--ec2-endpoint',
        moto.endpoint,
        '--region',
        'us-east-1',
        '--leader-election-namespace',
        'default',
        '--eni-gc-interval',
        '0',
        '--metrics-address',
        `127.0.0.1:${metricsPort}`,
      ],
      'operator.log',
    );
    await eventually(
      'the CiliumNode CRD served',
      async () => (await cluster.api('GET', '/apis/cilium.io/v2/ciliumnodes')).status === 200,
      60_000,
      250,
    ).catch(withLogs);

    const agent = cluster.daemons.start(
      'cilium-eni-agent',
      [
        '--kubeconfig',
        cluster.kubeconfig,
        '--node-name',
        nodeName,
        '--socket',
        socket,
        '--instance-id',
        instanceId,
        '--instance-type',
        'm5.large',
        '--vpc-id',
        w.vpcId,
        '--availability-zone',
        w.az,
        '--node-subnet-id',
        w.nodeSubnetId,
        '--pre-allocate',
        '4',
      ],
      'agent.log',
    );

    // The node gets its pool: at least pre-allocate IPs, each on an ENI described in status.eni.enis.
    const node = await eventually(
      `CiliumNode ${nodeName} with 4 usable IPs in its pool`,
      async () => {
        const r = await ciliumNode(nodeName);
        const enis = r.body.status?.eni?.enis ?? {};
        const pool = Object.entries(r.body.spec?.ipam?.pool ?? {}).filter(([, v]) => v.resource !== undefined && v.resource in enis);
        return r.status === 200 && pool.length >= 4 ? r.body : undefined;
      },
      90_000,
      500,
    ).catch(withLogs);
    expect(node.spec['instance-id']).toBe(instanceId);
    expect(node.spec.eni).toMatchObject({ 'instance-type': 'm5.large', 'vpc-id': w.vpcId });
    expect(node.status?.ipam?.['operator-status']?.error).toBeFalsy();
    const metrics = await fetch(`http://127.0.0.1:${metricsPort}/metrics`).then(async (r) => ({ status: r.status, text: await r.text() }));
    expect(metrics.text).toMatch(new RegExp(`cilium_operator_ipam_available_ips\\{node="${nodeName}"\\} [1-9]`));

    // The agent serves its socket once the pool is there; a node namespace holds every ENI's link.
    await eventually("the agent's socket", async () => fs.existsSync(socket), 30_000, 200);
    const host = await Netns.create('enid');
    const enis = Object.values(node.status!.eni!.enis!);
    for (const e of enis) {
      await host.ip('link', 'add', `eni${e.number}`, 'address', e.mac!, 'type', 'veth', 'peer', 'name', `eni${e.number}p`);
      await host.ip('link', 'set', `eni${e.number}p`, 'up');
    }
    const conf = { cniVersion: '1.1.0', name: 'eni', type: 'cilium-cni', ipam: { type: 'cilium-eni-ipam', socket } };
    const env = (cmd: string) => ({
      CNI_COMMAND: cmd,
      CNI_CONTAINERID: 'e2e-daemons-01',
      CNI_NETNS: '/run/netns/none',
      CNI_IFNAME: 'eth0',
      CNI_PATH,
    });
    const add = await execPlugin(pluginPath('cilium-eni-ipam'), env('ADD'), conf, host);
    if (add.code !== 0) throw new Error(`ADD failed: ${add.stdout} ${add.stderr}\n${cluster.logs()}`);
    const ip = String(add.json.ips[0].address).split('/')[0]!;
    expect(node.spec.ipam!.pool![ip]).toBeDefined();
    const eni = node.status!.eni!.enis![node.spec.ipam!.pool![ip]!.resource!]!;
    expect(add.json).toMatchObject({
      interfaces: [{ name: `eni${eni.number}`, mac: eni.mac }],
      ips: [{ gateway: '10.0.0.1' }],
      routes: [{ dst: '10.0.0.0/16', gw: '10.0.0.1' }],
    });
    expect(await host.ip('rule', 'show')).toContain(`from ${ip} lookup ${10 + eni.number}`);

    // CHECK passes against the real agent; the agent published the allocation as used.
    const chk = await execPlugin(pluginPath('cilium-eni-ipam'), env('CHECK'), { ...conf, prevResult: add.json }, host);
    expect(chk.code).toBe(0);
    await eventually(
      `${ip} published as used by e2e-daemons-01/eth0`,
      async () => (await ciliumNode(nodeName)).body.status?.ipam?.used?.[ip]?.owner === 'e2e-daemons-01/eth0',
      20_000,
      250,
    );

    // GC with no valid attachment frees it and removes the rule.
    const gc = await execPlugin(
      pluginPath('cilium-eni-ipam'),
      { CNI_COMMAND: 'GC', CNI_PATH },
      { ...conf, 'cni.dev/valid-attachments': [] },
      host,
    );
    expect(gc.code).toBe(0);
    expect(await host.ip('rule', 'show')).not.toContain(`from ${ip} `);
    await eventually(
      'no IP left in use',
      async () => Object.keys((await ciliumNode(nodeName)).body.status?.ipam?.used ?? {}).length === 0,
      20_000,
      250,
    );
    await cluster.daemons.stop(agent);
  });
});
