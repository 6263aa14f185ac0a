/**
 * The built cilium-eni-ipam executable (dist/bin) run the way a runtime runs it, inside a "node" namespace
 * holding an ENI link (a veth with the ENI's MAC), against a stand-in agent on a UNIX socket (the agent's
 * protocol and address book from the package; the real agent is tested with a kube-apiserver in the package).
 */
import * as fs from 'node:fs';
import * as net from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import { CNI_PATH, Netns, deleteAllNamespaces, describeWithPlugin, execPlugin, pluginPath } from '../lib';
import { PoolAllocator } from '../../packages/cilium-eni-ipam/src/pool';
import { stubAgent } from '@cnikit/cilium-eni-ipam-testing';

const MAC = '02:aa:bb:cc:dd:02';

describeWithPlugin('cilium-eni-ipam')('cilium-eni-ipam binary', () => {
  let node: Netns;
  let dir: string;
  let srv: net.Server;
  const pool = new PoolAllocator();

  beforeAll(async () => {
    node = await Netns.create('eni');
    await node.ip('link', 'add', 'ens6', 'address', MAC, 'type', 'veth', 'peer', 'name', 'ens6p');
    await node.ip('addr', 'add', '172.16.32.5/20', 'dev', 'ens6');
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cnikit-e2e-eni-'));
    pool.setNode({
      metadata: { name: 'n' },
      spec: { ipam: { pool: { '172.16.32.20': { resource: 'eni-2' } } } },
      status: {
        eni: {
          enis: {
            'eni-2': {
              id: 'eni-2',
              mac: MAC,
              number: 2,
              subnet: { id: 's', cidr: '172.16.32.0/20' },
              vpc: { id: 'v', cidrs: ['172.16.0.0/16'] },
            },
          },
        },
      },
    });
    srv = await stubAgent(path.join(dir, 'agent.sock'), pool);
  });
  afterAll(async () => {
    await new Promise((r) => srv.close(r));
    await deleteAllNamespaces();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  const conf = { cniVersion: '1.0.0', name: 'eni', type: 'cilium-cni', ipam: { type: 'cilium-eni-ipam', socket: '' } };
  const env = (cmd: string) => ({
    CNI_COMMAND: cmd,
    CNI_CONTAINERID: 'e2e-eni-0001',
    CNI_NETNS: '/run/netns/none',
    CNI_IFNAME: 'eth0',
    CNI_PATH,
  });

  test('ADD returns the ENI IP and sets the rule into table 12; DEL removes it; the lease is freed', async () => {
    const c = { ...conf, ipam: { ...conf.ipam, socket: path.join(dir, 'agent.sock') } };
    const add = await execPlugin(pluginPath('cilium-eni-ipam'), env('ADD'), c, node);
    expect(add.code).toBe(0);
    expect(add.json).toMatchObject({
      cniVersion: '1.0.0',
      interfaces: [{ name: 'eni2', mac: MAC }],
      ips: [{ address: '172.16.32.20/20', gateway: '172.16.32.1' }],
      routes: [{ dst: '172.16.0.0/16', gw: '172.16.32.1' }],
    });
    expect(await node.ip('rule', 'show')).toMatch(/111:\s+from 172\.16\.32\.20 lookup 12/);
    expect(await node.ip('route', 'show', 'table', '12')).toMatch(/default via 172\.16\.32\.1 dev ens6/);
    const del = await execPlugin(pluginPath('cilium-eni-ipam'), env('DEL'), c, node);
    expect(del.code).toBe(0);
    expect(await node.ip('rule', 'show')).not.toMatch(/172\.16\.32\.20/);
    expect(pool.used.size).toBe(0);
  });

  test('VERSION', async () => {
    const r = await execPlugin(pluginPath('cilium-eni-ipam'), { CNI_COMMAND: 'VERSION' }, { cniVersion: '1.1.0' });
    expect(r.json.supportedVersions).toContain('1.1.0');
  });
});
