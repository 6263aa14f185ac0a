/**
 * terwayd against a real kube-apiserver + etcd (started once for this file by @cnikit/kube/testing):
 * live changes of the eni-config ConfigMap (applied, refused, waiting for a restart; 10-terway.conf
 * rewritten), and the VPC route mode's pod CIDR read from the Node object.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { ConfigMaps, Nodes, clientFor, type KubeTransport } from '@cnikit/kube';
import { eventually, startCluster, stopCluster, transportFor, uniqueName, type ClusterInfo } from '@cnikit/kube-testing';
import { newNs, type TestNs } from '@cnikit/netlib-testing';
import type { FakeOpenApi } from '@cnikit/aliyun-emulator';
import { startTerwayd, type Terwayd } from '../src/daemon/bootstrap';
import { loadEniConfigMap } from '../src/daemon/eni-config';
import { nodePodCidr } from '../src/daemon/node-cidr';
import { cleanUp, nodeDaemon, startNodeApi } from './support';

jest.setTimeout(120_000);

let cluster: ClusterInfo;
let transport: KubeTransport;

beforeAll(async () => {
  cluster = await startCluster({
    stateDir: fs.mkdtempSync(path.join(os.tmpdir(), 'terway-kube-')),
    buildScript: path.join(__dirname, '../../../tools/cluster/build.sh'),
    garbageCollector: false,
  });
  transport = transportFor(cluster);
});

afterAll(async () => {
  transport?.close?.();
  if (cluster) await stopCluster(cluster);
});

describe('eni-config ConfigMap watch', () => {
  let api: FakeOpenApi;
  let host: TestNs;
  let dir: string;
  let d: Terwayd | undefined;

  beforeEach(async () => {
    host = newNs('tkh');
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'terway-cmw-'));
    api = await startNodeApi(
      { attachDelayMs: 20 },
      {
        vswitches: { 'vsw-node': '192.168.0.0/24', 'vsw-pods': '192.168.8.0/24' },
        instanceType: 'ecs.g7.large',
        quota: { eniQuantity: 4, eniPrivateIpAddressQuantity: 10 },
      },
    );
  });

  afterEach(async () => {
    await cleanUp(d, api, host, dir);
    d = undefined;
  });

  const cniConf = (mtu: number): string => JSON.stringify({ cniVersion: '1.0.0', name: 'terway', type: 'terway', mtu });

  it('applies pool sizes, vSwitches, security groups and service_cidr live; restart keys wait; bad edits are refused', async () => {
    const name = uniqueName('eni-config');
    const cms = clientFor(transport, ConfigMaps);
    const conf0 = {
      max_pool_size: 5,
      min_pool_size: 0,
      security_group: 'sg-1',
      service_cidr: '172.16.0.0/16',
      access_key: 'LTAI-test',
      access_secret: 'test-secret',
    };
    await cms.create({
      apiVersion: 'v1',
      kind: 'ConfigMap',
      metadata: { name, namespace: 'kube-system' },
      data: { eni_conf: JSON.stringify(conf0), '10-terway.conf': cniConf(1500) },
    });
    const loaded = await loadEniConfigMap(transport, 'kube-system', name);
    const cniDir = path.join(dir, 'net.d');
    const logs: string[] = [];
    d = await startTerwayd({
      eniConf: loaded.eniConf,
      ...nodeDaemon(api, dir, host.ns),
      configMap: {
        transport,
        namespace: 'kube-system',
        name,
        cniConfDir: cniDir,
        ...(loaded.cniConf ? { initialCniConf: loaded.cniConf } : {}),
      },
      log: (m, f) => logs.push(`${m} ${JSON.stringify(f ?? {})}`),
    });
    // min_pool_size 0: nothing is created.
    await new Promise((r) => setTimeout(r, 300));
    expect(api.count('CreateNetworkInterface')).toBe(0);

    const conf1 = {
      ...conf0,
      min_pool_size: 3,
      max_pool_size: 8,
      security_group: undefined,
      security_groups: ['sg-2'],
      vswitches: { 'cn-hangzhou-i': ['vsw-pods'] },
      service_cidr: '10.96.0.0/12',
      eniip_virtual_type: 'ipvlan',
    };
    await cms.update({
      ...(await cms.get(name, { namespace: 'kube-system' })),
      data: { eni_conf: JSON.stringify(conf1), '10-terway.conf': cniConf(1450) },
    });
    const t0 = performance.now();
    await eventually('min_pool_size applied', () => d!.config.minPoolSize === 3, 15_000, 2);
    const appliedMs = performance.now() - t0;
    // The pool grows to the new minimum, on the new vSwitch, with the new security group.
    await eventually('3 idle IPs', () => d!.pool.stats().idle >= 3);
    const create = api.calls.find((c) => c.action === 'CreateNetworkInterface')!;
    expect(create.params['VSwitchId']).toBe('vsw-pods');
    expect(create.params['SecurityGroupId']).toBe('sg-2');
    expect(d.config).toMatchObject({ minPoolSize: 3, maxPoolSize: 8, serviceCidr: '10.96.0.0/12', virtualType: 'veth' });
    expect(d.configWatch!.pendingRestart).toEqual(['eniip_virtual_type']);
    const reply = await d.daemon.allocIP({
      K8sPodName: 'p',
      K8sPodNamespace: 'default',
      K8sPodInfraContainerId: 'c1',
      Netns: '',
      IfName: 'eth0',
    });
    expect(reply.NetConfs[0]!.BasicInfo?.ServiceCIDR).toEqual({ IPv4: '10.96.0.0/12', IPv6: '' });
    expect(JSON.parse(fs.readFileSync(path.join(cniDir, '10-terway.conf'), 'utf8'))).toMatchObject({ mtu: 1450 });
    expect(logs.some((l) => l.startsWith('eni-config: changed keys need a terwayd restart') && l.includes('eniip_virtual_type'))).toBe(
      true,
    );

    // An invalid edit is refused whole: nothing of it applies.
    const applied = d.configWatch!.stats.applied;
    await cms.update({
      ...(await cms.get(name, { namespace: 'kube-system' })),
      data: { eni_conf: JSON.stringify({ ...conf1, max_pool_size: 1, min_pool_size: 2 }) },
    });
    await eventually('the edit refused', () => d!.configWatch!.stats.rejected === 1);
    expect(d.configWatch!.stats.applied).toBe(applied);
    expect(d.config).toMatchObject({ minPoolSize: 3, maxPoolSize: 8 });

    // Smaller max: idle IPs above it go back to the cloud.
    await cms.update({
      ...(await cms.get(name, { namespace: 'kube-system' })),
      data: { eni_conf: JSON.stringify({ ...conf1, min_pool_size: 0, max_pool_size: 1 }) },
    });
    console.log(`terway eni-config watch: ConfigMap update answered -> min_pool_size applied in ${appliedMs.toFixed(1)} ms`);
    await eventually(
      'idle down to max_pool_size 1',
      () => d!.pool.stats().idle <= 1 && api.count('UnassignPrivateIpAddresses') + api.count('DeleteNetworkInterface') > 0,
    );
    expect(d.pool.leaseOf('default/p')).toBeDefined(); // the pod's IP is not taken back
    await cms.delete(name, { namespace: 'kube-system' });
  });
});

describe('VPC route mode: pod CIDR from the Node object', () => {
  it('reads spec.podCIDRs (then spec.podCIDR), waiting until the node has one', async () => {
    const nodes = clientFor(transport, Nodes);
    const a = uniqueName('node');
    await nodes.create({
      apiVersion: 'v1',
      kind: 'Node',
      metadata: { name: a },
      spec: { podCIDR: '10.244.3.0/24', podCIDRs: ['10.244.3.0/24', 'fd00:10:244:3::/64'] },
    });
    expect(await nodePodCidr(transport, a)).toBe('10.244.3.0/24');

    // A node without a CIDR yet (the node IPAM controller has not run): wait for it.
    const b = uniqueName('node');
    await nodes.create({ apiVersion: 'v1', kind: 'Node', metadata: { name: b }, spec: {} });
    const waiting = nodePodCidr(transport, b, { timeoutMs: 30_000 });
    await new Promise((r) => setTimeout(r, 300));
    await nodes.patch(b, { spec: { podCIDR: '10.244.7.0/24' } }, 'merge');
    expect(await waiting).toBe('10.244.7.0/24');

    await expect(nodePodCidr(transport, uniqueName('missing'), { timeoutMs: 500 })).rejects.toThrow(/no spec\.podCIDR/);
    await nodes.delete(a);
    await nodes.delete(b);
  });
});
