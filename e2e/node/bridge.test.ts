/**
 * Two real nodes (kubelet v1.37 + containerd 2.4 + runc, tools/node-lab) with Debian's bridge + host-local as
 * the pod network (CNI 1.0.0, one pod subnet per node, routed between the nodes): the lab itself, seen only
 * through kubectl as a user sees a cluster. Pods are placed by kube-scheduler (DaemonSet and node selectors).
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import {
  describeNodes,
  eventually,
  k,
  kjson,
  nodeNetState,
  nodePrerequisites,
  ping,
  podYaml,
  daemonSetYaml,
  readyCondition,
  runningPods,
  startNodes,
  stopNodes,
  type NodeEnv,
} from './lib';

let env: NodeEnv | undefined;
const e = (): NodeEnv => env!;

describeNodes('node: two nodes with bridge + host-local', nodePrerequisites(), () => {
  beforeAll(async () => {
    env = await startNodes(2, 'bridge');
  }, 3_600_000); // a cold cache builds kubelet, containerd and crictl first

  afterAll(async () => {
    await stopNodes(env);
    env = undefined;
  }, 180_000);

  test('both nodes are Ready, at the API server version, on containerd 2.4', async () => {
    const nodes = await kjson(e(), ['get', 'nodes']);
    expect(nodes.items.map((n) => n.metadata.name).sort()).toEqual(['kl-a', 'kl-b']);
    for (const n of nodes.items) {
      expect((await readyCondition(e(), n.metadata.name))?.status).toBe('True');
      expect(n.status?.nodeInfo?.kubeletVersion).toBe(e().cluster.version);
      expect(n.status?.nodeInfo?.containerRuntimeVersion).toBe('containerd://2.4.2');
      expect(n.status?.addresses).toContainEqual({
        type: 'InternalIP',
        address: n.metadata.name === 'kl-a' ? '198.51.100.11' : '198.51.100.12',
      });
    }
  });

  test('pods run on both nodes and ping each other on one node and across nodes', async () => {
    await k(e(), ['apply', '-f', '-'], daemonSetYaml('ds'));
    await k(e(), ['apply', '-f', '-'], podYaml('extra-a', 'kl-a'));
    const running = await runningPods(e(), 3);
    const on = (node: string): typeof running => running.filter((p) => p.node === node);
    expect(on('kl-a')).toHaveLength(2);
    expect(on('kl-b')).toHaveLength(1);
    for (const p of on('kl-a')) expect(p.ip).toMatch(/^10\.244\.1\./);
    for (const p of on('kl-b')) expect(p.ip).toMatch(/^10\.244\.2\./);
    const [a1, a2] = on('kl-a');
    const [b1] = on('kl-b');
    for (const [from, to] of [
      [a1, a2],
      [a2, a1],
      [a1, b1],
      [b1, a1],
      [b1, a2],
    ]) {
      const r = await ping(e(), from, to.ip);
      expect({ from: from.name, to: to.ip, out: r.stdout + r.stderr, code: r.code }).toEqual(expect.objectContaining({ code: 0 }));
      expect(r.stdout).toMatch(/2 packets received/);
    }
    // kubectl logs reaches each kubelet too (the API server dials the node's InternalIP over the fabric)
    expect((await k(e(), ['logs', b1.name])).trim()).toBe('');
  });

  test('deleting the pods releases every address and leaves no pod link or route on the nodes', async () => {
    await k(e(), ['delete', 'daemonset', 'ds', '--wait=true']);
    await k(e(), ['delete', 'pod', 'extra-a', '--wait=true']);
    for (const node of e().lab.nodes) {
      await eventually(`no sandbox left on ${node.name}`, async () => {
        const s = nodeNetState(node);
        const pod = s.links.filter((l) => !['lo', 'eth0', 'klbr0'].includes(l));
        if (pod.length === 0) return s;
        throw new Error(`links ${pod.join(' ')}`);
      });
      const s = nodeNetState(node);
      const others = e().lab.nodes.filter((n) => n !== node);
      // what remains is the node's own config: its fabric link, the bridge (the plugin keeps it), the routes to the
      // other nodes' pod subnets
      expect(s.routes.sort()).toEqual(
        [
          `${node.podSubnet} dev klbr0 proto kernel scope link src ${node.podSubnet.replace(/0\/24$/, '1')}`,
          ...others.map((o) => `${o.podSubnet} via ${o.ip} dev eth0`),
          `198.51.100.0/24 dev eth0 proto kernel scope link src ${node.ip}`,
        ].sort(),
      );
      const ipam = path.join(node.dir, 'cni', 'ipam', 'lab-bridge');
      const held = fs.existsSync(ipam) ? fs.readdirSync(ipam).filter((f) => /^\d+\.\d+\.\d+\.\d+$/.test(f)) : [];
      expect({ node: node.name, held }).toEqual({ node: node.name, held: [] });
    }
  });

  test('down stops everything and leaves nothing on the host', async () => {
    const leaks = await stopNodes(env);
    env = undefined;
    expect(leaks).toEqual([]);
  }, 180_000);
});
