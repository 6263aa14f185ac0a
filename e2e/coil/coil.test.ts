/**
 * Coil with the built executables (dist/bin/coil, coild, coil-ipam-controller) against a real
 * kube-apiserver started for this file: two "nodes" (network namespaces on a bridge), each served by its own
 * coild process (--netns, --node-name, own socket, --enable-egress: it reads each Pod object on ADD), the controller under leader election, pods set up by
 * the `coil` binary. Real traffic between nodes, a coild restart, freed blocks, the metrics and health
 * endpoints. The API is driven through the kube kit's transport (requestRaw: the status of every call) with the
 * cluster's admin kubeconfig.
 */
import type { ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { loadAll } from 'js-yaml';
import { eventually, freePort } from '@cnikit/kube-testing';
import { Netns, describeWithPlugin, pluginPath, run, REPO_ROOT } from '../lib';
import { E2eCluster } from '../lib/cluster';

const BINARIES = ['coil', 'coild', 'coil-ipam-controller'];
const describeBuilt = describeWithPlugin(...BINARIES);

const cluster = new E2eCluster('coil-e2e');
const coilPath = (plural: string, name = ''): string => `/apis/coil.cybozu.com/v2/${plural}${name ? `/${name}` : ''}`;

function http(url: string): Promise<{ status: number; text: string }> {
  return new Promise((resolve, reject) => {
    require('node:http')
      .get(url, (res: import('node:http').IncomingMessage) => {
        let text = '';
        res.on('data', (c: Buffer) => {
          text += c.toString();
        });
        res.on('end', () => resolve({ status: res.statusCode ?? 0, text }));
      })
      .on('error', reject);
  });
}

interface Node {
  name: string;
  ns: Netns;
  ip: string;
  socket: string;
  metrics: number;
  health: number;
  proc?: ChildProcess;
}

/**
 * Starts coild on `n` and waits for its /readyz. Its ports were free when the file picked them, but on a busy
 * machine another process's outgoing connection can take one before coild binds it: coild then exits, and it is
 * started again on new ports (three attempts). A failure carries the daemons' logs.
 */
async function startCoild(n: Node): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    try {
      await startCoildOnce(n);
      return;
    } catch (err) {
      if (n.proc?.exitCode === null || attempt === 3) throw new Error(`${(err as Error).message}\n${cluster.logs()}`, { cause: err });
      n.metrics = await freePort();
      n.health = await freePort();
    }
  }
}

async function startCoildOnce(n: Node): Promise<void> {
  n.proc = cluster.daemons.start(
    'coild',
    [
      '--kubeconfig',
      cluster.kubeconfig,
      '--netns',
      n.ns.path,
      '--node-name',
      n.name,
      '--socket',
      n.socket,
      '--enable-egress',
      '--metrics-addr',
      `127.0.0.1:${n.metrics}`,
      '--health-addr',
      `127.0.0.1:${n.health}`,
    ],
    `${n.name}.log`,
  );
  await eventually(`coild ${n.name} /readyz`, async () => (await http(`http://127.0.0.1:${n.health}/readyz`)).status === 200, 30_000, 100);
}

/** The Pod object kubelet would have created: coild with --enable-egress reads it on ADD, as Coil does. */
async function ensurePod(name: string, node: string): Promise<void> {
  const r = await cluster.api('POST', '/api/v1/namespaces/default/pods', {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name },
    spec: { nodeName: node, automountServiceAccountToken: false, containers: [{ name: 'c', image: 'busybox' }] },
  });
  if (r.status !== 201 && r.status !== 409) throw new Error(`create pod ${name}: ${r.status} ${JSON.stringify(r.body)}`);
}

async function coil(
  n: Node,
  command: string,
  pod: Netns,
  containerId: string,
  extra: Record<string, unknown> = {},
): Promise<{ code: number | null; out: Record<string, unknown> | undefined }> {
  const podName = `p-${containerId}`;
  if (command === 'ADD') await ensurePod(podName, n.name);
  const conf = { cniVersion: '1.0.0', name: 'k8s-pod-network', type: 'coil', socket: n.socket, ...extra };
  const r = await run([pluginPath('coil')], {
    input: JSON.stringify(conf),
    env: {
      CNI_COMMAND: command,
      CNI_CONTAINERID: containerId,
      CNI_NETNS: pod.path,
      CNI_IFNAME: 'eth0',
      CNI_PATH: path.dirname(pluginPath('coil')),
      CNI_ARGS: `IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=${podName}`,
    },
  });
  return { code: r.code, out: r.stdout.trim() ? (JSON.parse(r.stdout) as Record<string, unknown>) : undefined };
}

/** BIRD's part: `to` learns `from`'s table-119 routes via from's LAN address. */
async function importRoutes(from: Node, to: Node): Promise<void> {
  const routes = await from.ns.ipJson<{ dst: string; protocol?: string }>('route', 'show', 'table', '119');
  for (const r of routes) await to.ns.ip('route', 'replace', r.dst, 'via', from.ip, 'proto', '186');
}

describeBuilt('coil executables (two nodes, real API server)', () => {
  const nodes: Node[] = [];
  let ctlMetrics: number;

  beforeAll(async () => {
    await cluster.start();
    for (const crd of loadAll(fs.readFileSync(path.join(REPO_ROOT, 'packages/coil/config/crds.yaml'), 'utf8'))) {
      expect((await cluster.api('POST', '/apis/apiextensions.k8s.io/v1/customresourcedefinitions', crd)).status).toBe(201);
    }
    const served = async (plural: string): Promise<boolean> => (await cluster.api('GET', coilPath(plural))).status === 200;
    await eventually(
      'the coil CRDs served',
      async () => (await Promise.all(['addresspools', 'addressblocks', 'blockrequests'].map(served))).every(Boolean),
      30_000,
      200,
    );
    expect(
      (
        await cluster.api('POST', coilPath('addresspools'), {
          apiVersion: 'coil.cybozu.com/v2',
          kind: 'AddressPool',
          metadata: { name: 'default' },
          spec: { blockSizeBits: 4, subnets: [{ ipv4: '10.130.0.0/24' }] },
        })
      ).status,
    ).toBe(201);

    const lan = await Netns.create('coillan');
    await lan.ip('link', 'add', 'br0', 'type', 'bridge');
    await lan.ip('link', 'set', 'br0', 'up');
    for (const i of [1, 2]) {
      const ns = await Netns.create(`coilnode${i}`);
      const n: Node = {
        name: `node${i}`,
        ns,
        ip: `10.98.0.${i}`,
        socket: path.join(cluster.work, `coild${i}.sock`),
        metrics: await freePort(),
        health: await freePort(),
      };
      await ns.ip('link', 'add', 'eth0', 'type', 'veth', 'peer', 'name', `lan${i}`, 'netns', lan.name);
      await lan.ip('link', 'set', `lan${i}`, 'master', 'br0', 'up');
      await ns.ip('addr', 'add', `${n.ip}/24`, 'dev', 'eth0');
      await ns.ip('link', 'set', 'eth0', 'up');
      // Forwarding stays off (the namespace baseline, as on a freshly booted node): coild turns it on.
      expect((await cluster.api('POST', '/api/v1/nodes', { apiVersion: 'v1', kind: 'Node', metadata: { name: n.name } })).status).toBe(201);
      const st = await cluster.api(
        'PATCH',
        `/api/v1/nodes/${n.name}/status`,
        { status: { addresses: [{ type: 'InternalIP', address: n.ip }] } },
        'application/merge-patch+json',
      );
      expect(st.status).toBe(200);
      nodes.push(n);
    }
    ctlMetrics = await freePort();
    const ctlHealth = await freePort();
    cluster.daemons.start(
      'coil-ipam-controller',
      [
        '--kubeconfig',
        cluster.kubeconfig,
        '--metrics-addr',
        `127.0.0.1:${ctlMetrics}`,
        '--health-addr',
        `127.0.0.1:${ctlHealth}`,
        '--leader-election-namespace',
        'kube-system',
      ],
      'controller.log',
    );
    for (const n of nodes) await startCoild(n);
  }, 180_000);

  afterAll(() => cluster.stop());

  it('pods on two nodes talk; a coild restart keeps the state; DEL frees the blocks; metrics and health answer', async () => {
    const [n1, n2] = nodes as [Node, Node];
    const pa = await Netns.create('coilpod');
    const pb = await Netns.create('coilpod');
    const pc = await Netns.create('coilpod');
    const ra = await coil(n1, 'ADD', pa, 'ctr-a');
    expect(ra.code).toBe(0);
    const rb = await coil(n2, 'ADD', pb, 'ctr-b');
    expect(rb.code).toBe(0);
    const ip = (r: typeof ra): string => (r.out!['ips'] as { address: string }[])[0]!.address.split('/')[0]!;
    await importRoutes(n1, n2);
    await importRoutes(n2, n1);
    await pa.execOk(['ping', '-c', '2', '-W', '2', ip(rb)]);
    await pb.execOk(['ping', '-c', '2', '-W', '2', ip(ra)]);
    expect((await coil(n1, 'CHECK', pa, 'ctr-a', { prevResult: ra.out })).code).toBe(0);

    // Restart node 1's coild: the pod keeps its address, the next pod gets another one from the same block.
    await cluster.daemons.stop(n1.proc!);
    await startCoild(n1);
    const rc = await coil(n1, 'ADD', pc, 'ctr-c');
    expect(rc.code).toBe(0);
    expect(ip(rc)).not.toBe(ip(ra));
    const blocks = await cluster.api<{ items: unknown[] }>(
      'GET',
      `${coilPath('addressblocks')}?labelSelector=coil.cybozu.com%2Fnode%3Dnode1`,
    );
    expect(blocks.body.items).toHaveLength(1);
    await pc.execOk(['ping', '-c', '1', '-W', '2', ip(rb)]);

    const m = await http(`http://127.0.0.1:${n1.metrics}/metrics`);
    expect(m.text).toMatch(/grpc_server_handled_total\{[^}]*grpc_method="Add"[^}]*\} 1/);
    await eventually(
      'controller metrics: 16 blocks in the pool, 2 allocated',
      async () => {
        const cm = await http(`http://127.0.0.1:${ctlMetrics}/metrics`);
        return (
          /coil_controller_max_blocks\{pool="default"\} 16/.test(cm.text) &&
          /coil_controller_allocated_blocks\{pool="default"\} 2/.test(cm.text)
        );
      },
      15_000,
      200,
    );

    for (const [n, p, id] of [
      [n1, pa, 'ctr-a'],
      [n2, pb, 'ctr-b'],
      [n1, pc, 'ctr-c'],
    ] as const) {
      expect((await coil(n, 'DEL', p, id)).code).toBe(0);
      expect((await coil(n, 'DEL', p, id)).code).toBe(0);
    }
    await eventually(
      'no address block left',
      async () => (await cluster.api<{ items: unknown[] }>('GET', coilPath('addressblocks'))).body.items.length === 0,
      15_000,
      200,
    );
    expect(await n1.ns.ipJson('route', 'show', 'table', '119')).toEqual([]);
  });

  it('coil answers STATUS 50 when coild is not running', async () => {
    const pod = await Netns.create('coilpod');
    const r = await coil({ ...nodes[0]!, socket: path.join(cluster.work, 'none.sock') }, 'STATUS', pod, 'x', { cniVersion: '1.1.0' });
    expect(r.out?.['code']).toBe(50);
  });
});
