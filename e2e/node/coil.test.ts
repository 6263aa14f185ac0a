/**
 * Coil on two real nodes, installed as a user installs it: `npm run images -- coil` (imported into each node's
 * containerd: no registry), then `kubectl apply -f` of packages/coil/config/{crds,rbac,deploy}.yaml and an
 * AddressPool. Then the real Multus thin plugin (built from shared/third_party/multus-cni) goes in front of Coil,
 * veth and router are installed by their DaemonSet (packages/meta/config/install.yaml) and pods get a second
 * network from NetworkAttachmentDefinitions. Everything is observed through kubectl and the nodes' kernels;
 * cross-node routes are the one part a user's BGP daemon would play (BIRD reading table 119, docs/coil.md): the
 * test copies them.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { loadAll } from 'js-yaml';
import { REPO_ROOT } from '../lib/paths';
import { crictl, importImage, nodeRun, restartInNode, writeFileAtomic, type LabNode } from '../../tools/node-lab/lab';
import {
  buildImages,
  describeNodes,
  eventually,
  k,
  nodeNetState,
  nodePrerequisites,
  ping,
  podsIn,
  readyCondition,
  startNodes,
  stopNodes,
  TEST_CONTAINER,
  type NodeEnv,
  type PodInfo,
} from './lib';

const CONFIG = path.join(REPO_ROOT, 'packages', 'coil', 'config');
const META_CONFIG = path.join(REPO_ROOT, 'packages', 'meta', 'config');
const MULTUS_SRC = process.env.CNIKIT_MULTUS_SRC ?? path.join(REPO_ROOT, '..', 'shared', 'third_party', 'multus-cni');
const POOL = '10.100.0.0/16';
let env: NodeEnv | undefined;
const e = (): NodeEnv => env!;

const poolYaml = JSON.stringify({
  apiVersion: 'coil.cybozu.com/v2',
  kind: 'AddressPool',
  metadata: { name: 'default' },
  spec: { blockSizeBits: 5, subnets: [{ ipv4: POOL }] },
});

function deploymentYaml(name: string, replicas: number, node?: string): string {
  return JSON.stringify({
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: { name, namespace: 'default' },
    spec: {
      replicas,
      selector: { matchLabels: { app: name } },
      template: {
        metadata: { labels: { app: name } },
        spec: {
          ...(node ? { nodeSelector: { 'kubernetes.io/hostname': node } } : {}),
          terminationGracePeriodSeconds: 1,
          containers: [TEST_CONTAINER],
        },
      },
    },
  });
}

const HIJACK = { overlay_hijack_subnet: [POOL], service_hijack_subnet: ['10.0.0.0/24'] };

/** A NetworkAttachmentDefinition: macvlan on the node's NIC (host-local, CNI 1.0.0: Debian's plugins) + `meta`. */
function nadYaml(name: string, start: string, end: string, meta: Record<string, unknown>, gateway?: string): string {
  const range = { subnet: '198.51.100.0/24', rangeStart: start, rangeEnd: end, ...(gateway ? { gateway } : {}) };
  const ipam = { type: 'host-local', ranges: [[range]], ...(gateway ? { routes: [{ dst: '0.0.0.0/0' }] } : {}) };
  const config = { cniVersion: '1.0.0', name, plugins: [{ type: 'macvlan', master: 'eth0', mode: 'bridge', ipam }, meta] };
  return JSON.stringify({
    apiVersion: 'k8s.cni.cncf.io/v1',
    kind: 'NetworkAttachmentDefinition',
    metadata: { name, namespace: 'default' },
    spec: { config: JSON.stringify(config) },
  });
}

function multiPodYaml(name: string, network: string): string {
  return JSON.stringify({
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, namespace: 'default', labels: { app: 'multi' }, annotations: { 'k8s.v1.cni.cncf.io/networks': network } },
    spec: {
      nodeSelector: { 'kubernetes.io/hostname': 'kl-a' },
      terminationGracePeriodSeconds: 1,
      containers: [TEST_CONTAINER],
    },
  });
}

/** The NetworkAttachmentDefinition CRD, read from Multus's own deployment manifest. */
function multusCrds(): unknown[] {
  const docs = loadAll(fs.readFileSync(path.join(MULTUS_SRC, 'deployments', 'multus-daemonset.yml'), 'utf8')) as { kind?: string }[];
  return docs.filter((d) => d?.kind === 'CustomResourceDefinition');
}

/**
 * What Multus's thin DaemonSet does on each node (its image is not built here): the multus binary and the
 * reference macvlan/host-local next to our plugins, and 00-multus.conf (first in the conf dir, so the runtime
 * uses it) delegating the cluster network to Coil's conflist. cniVersion 1.1.0: STATUS reaches Coil through it.
 */
function installMultus(env: NodeEnv): void {
  const multus = env.lab.bins.multus;
  if (!multus) throw new Error('tools/node-lab/build.sh built no multus');
  for (const node of env.lab.nodes) {
    for (const [src, name] of [
      [multus, 'multus'],
      ['/usr/lib/cni/macvlan', 'macvlan'],
      ['/usr/lib/cni/host-local', 'host-local'],
    ] as const) {
      fs.copyFileSync(src, path.join(node.cniBinDir, `.${name}.tmp`));
      fs.chmodSync(path.join(node.cniBinDir, `.${name}.tmp`), 0o755);
      fs.renameSync(path.join(node.cniBinDir, `.${name}.tmp`), path.join(node.cniBinDir, name));
    }
    const conf = {
      cniVersion: '1.1.0',
      name: 'multus-cni-network',
      type: 'multus',
      kubeconfig: env.cluster.kubeconfig,
      clusterNetwork: '/etc/cni/net.d/10-coil.conflist',
    };
    writeFileAtomic(path.join(node.cniConfDir, '00-multus.conf'), JSON.stringify(conf));
  }
}

/** Deletes a Deployment and waits until its pods are gone (kubectl's --wait covers only the Deployment itself). */
async function deleteApp(app: string): Promise<void> {
  await k(e(), ['delete', 'deployment', app, '--wait=true']);
  await eventually(`no ${app} pod left`, async () => (await podsIn(e(), 'default', `app=${app}`)).length === 0);
}

/** kubectl patch of coild's DaemonSet (to take it off a node and back). */
async function patchCoild(type: 'merge' | 'json', patch: string): Promise<void> {
  await k(e(), ['-n', 'kube-system', 'patch', 'ds', 'coild', '--type', type, '-p', patch]);
}

/** What BIRD does on a real network: each node learns the others' blocks (table 119) via their address. */
function exchangeRoutes(nodes: LabNode[]): void {
  for (const from of nodes) {
    const routes = nodeRun(from, ['ip', '-j', 'route', 'show', 'table', '119']);
    for (const r of JSON.parse(routes || '[]') as { dst: string }[]) {
      for (const to of nodes) if (to !== from) nodeRun(to, ['ip', 'route', 'replace', r.dst, 'via', from.ip, 'proto', '186']);
    }
  }
}

const inPool = (ip: string): boolean => /^10\.100\.\d+\.\d+$/.test(ip);

async function runningApp(app: string, count: number): Promise<PodInfo[]> {
  return eventually(
    `${count} pods of ${app} Running with an address`,
    async () => {
      const list = await podsIn(e(), 'default', `app=${app}`);
      const running = list.filter((p) => p.phase === 'Running' && p.ip);
      if (running.length === count) return running;
      throw new Error(`${running.length}/${count} running: ${list.map((p) => `${p.name} ${p.phase} ${p.node} ${p.ip}`).join('; ')}`);
    },
    240_000,
  );
}

const missingMultus = fs.existsSync(path.join(MULTUS_SRC, 'go.mod')) ? [] : [`the Multus source at ${MULTUS_SRC} (CNIKIT_MULTUS_SRC)`];

describeNodes(
  'node: Coil from its image and manifests on two real nodes, Multus in front with veth and router',
  nodePrerequisites(missingMultus),
  () => {
    beforeAll(async () => {
      const images = buildImages(['coil', 'veth-router']);
      env = await startNodes(2, 'none');
      for (const file of Object.values(images)) importImage(env.lab, file);
    }, 3_600_000);

    afterAll(async () => {
      await stopNodes(env);
      env = undefined;
    }, 240_000);

    test('without a network the nodes register NotReady, naming the runtime network', async () => {
      for (const node of e().lab.nodes) {
        const c = await eventually(`${node.name} Ready condition`, () => readyCondition(e(), node.name));
        expect(c.status).toBe('False');
        expect(c.message).toMatch(/network plugin|NetworkReady=false|cni/i);
      }
    });

    test('kubectl apply of the manifests: coild on every node, the nodes turn Ready', async () => {
      await k(e(), ['apply', '-f', path.join(CONFIG, 'crds.yaml')]);
      await k(e(), ['wait', '--for=condition=Established', 'crd/addresspools.coil.cybozu.com', '--timeout=60s']);
      await k(e(), ['apply', '-f', path.join(CONFIG, 'rbac.yaml'), '-f', path.join(CONFIG, 'deploy.yaml')]);
      await k(e(), ['apply', '-f', '-'], poolYaml);
      for (const node of e().lab.nodes) {
        await eventually(`${node.name} Ready`, async () => (await readyCondition(e(), node.name))?.status === 'True', 240_000);
        // the install step left the plugin (a link to the image's one executable) and the conflist, nothing else
        expect(nodeRun(node, ['ls', '-A', '/opt/cni/bin']).split('\n').filter(Boolean).sort()).toEqual(['cnikit-coil', 'coil', 'loopback']);
        expect(nodeRun(node, ['ls', '-A', '/etc/cni/net.d']).trim()).toBe('10-coil.conflist');
      }
      const coild = await podsIn(e(), 'kube-system', 'app.kubernetes.io/name=coild');
      expect(coild.map((p) => p.node).sort()).toEqual(['kl-a', 'kl-b']);
      await k(e(), ['-n', 'kube-system', 'rollout', 'status', 'deployment/coil-ipam-controller', '--timeout=180s']);
    });

    /** Links and pod routes of each node before a test's pods (Coil's own pods, e.g. coil-egress-controller, have some). */
    const before = new Map<string, { links: string[]; podRoutes: string; rules: string }>();
    const snapshot = (): void => {
      for (const node of e().lab.nodes)
        before.set(node.name, {
          links: nodeNetState(node).links,
          podRoutes: nodeRun(node, ['ip', 'route', 'show', 'table', '116']),
          rules: nodeRun(node, ['ip', 'rule']),
        });
    };
    /** Waits until a node has no link the snapshot did not have, then checks the pod routes are back too. */
    const backToSnapshot = async (node: LabNode): Promise<void> => {
      const was = before.get(node.name)!;
      await eventually(`no new link on ${node.name}`, async () => {
        const extra = nodeNetState(node).links.filter((l) => !was.links.includes(l));
        if (extra.length === 0) return true;
        throw new Error(extra.join(' '));
      });
      expect(nodeRun(node, ['ip', 'route', 'show', 'table', '116'])).toBe(was.podRoutes);
      expect(nodeRun(node, ['ip', 'rule'])).toBe(was.rules);
    };

    test('30 pods get distinct Coil addresses and ping each other on one node and across nodes', async () => {
      snapshot();
      await k(e(), ['apply', '-f', '-'], deploymentYaml('web', 30));
      const pods = await runningApp('web', 30);
      expect(pods.every((p) => inPool(p.ip))).toBe(true);
      expect(new Set(pods.map((p) => p.ip)).size).toBe(30);
      const on = (n: string): PodInfo[] => pods.filter((p) => p.node === n);
      expect(on('kl-a').length).toBeGreaterThan(0);
      expect(on('kl-b').length).toBeGreaterThan(0);
      exchangeRoutes(e().lab.nodes);
      const [a1, a2] = on('kl-a').length > 1 ? on('kl-a') : [on('kl-a')[0]!, on('kl-a')[0]!];
      const b1 = on('kl-b')[0]!;
      for (const [from, to] of [
        [a1!, a2!],
        [a1!, b1],
        [b1, a1!],
      ] as const) {
        const r = await ping(e(), from, to.ip);
        expect({ from: from.name, to: to.ip, code: r.code, out: r.stdout + r.stderr }).toEqual(expect.objectContaining({ code: 0 }));
      }
    });

    test('deleting the pods returns every address and leaves no pod link, route or rule on the nodes', async () => {
      await deleteApp('web');
      for (const node of e().lab.nodes) await backToSnapshot(node);
    });

    test('the real Multus in front of Coil: a pod gets net1 from macvlan + veth, reaching its node and a Service address through veth0', async () => {
      installMultus(e());
      await k(e(), ['apply', '-f', '-'], JSON.stringify({ apiVersion: 'v1', kind: 'List', items: multusCrds() }));
      await k(e(), ['wait', '--for=condition=Established', 'crd/network-attachment-definitions.k8s.cni.cncf.io', '--timeout=60s']);
      await k(e(), ['apply', '-f', path.join(META_CONFIG, 'install.yaml')]);
      for (const node of e().lab.nodes) {
        await eventually(`veth and router installed on ${node.name}`, async () =>
          ['veth', 'router'].every(
            (p) => fs.existsSync(path.join(node.cniBinDir, p)) && fs.readlinkSync(path.join(node.cniBinDir, p)) === 'cnikit-veth-router',
          ),
        );
      }
      snapshot();
      await k(e(), ['apply', '-f', '-'], nadYaml('macvlan-veth', '198.51.100.100', '198.51.100.149', { type: 'veth', ...HIJACK }));
      await k(e(), ['apply', '-f', '-'], multiPodYaml('mv', 'macvlan-veth'));
      await runningApp('multi', 1);
      const ifaces = await k(e(), ['exec', 'mv', '--', 'ip', '-o', 'addr']);
      expect(ifaces).toMatch(/eth0\s+inet 10\.100\./);
      expect(ifaces).toMatch(/net1\s+inet 198\.51\.100\.1[0-4]\d\//);
      expect(await k(e(), ['exec', 'mv', '--', 'ip', 'route', 'get', '10.0.0.1'])).toMatch(/dev veth0/);
      // the Service address (the lab's API server relay listens on it) and the node, both through veth0
      for (const dst of ['10.0.0.1', '198.51.100.11'])
        expect((await ping(e(), { name: 'mv' } as PodInfo, dst)).stdout).toMatch(/2 packets received/);
      const status = JSON.parse(
        await k(e(), ['get', 'pod', 'mv', '-o', 'jsonpath={.metadata.annotations.k8s\\.v1\\.cni\\.cncf\\.io/network-status}']),
      );
      expect(status.map((s: { interface: string; name: string }) => `${s.interface} ${s.name}`)).toEqual([
        'eth0 k8s-pod-network',
        'net1 default/macvlan-veth',
        'veth0 default/macvlan-veth',
      ]);
    });

    test('macvlan + router behind Multus: east-west and Services via eth0 (Coil), the rest via net1', async () => {
      await k(
        e(),
        ['apply', '-f', '-'],
        nadYaml('macvlan-router', '198.51.100.150', '198.51.100.199', { type: 'router', ...HIJACK }, '198.51.100.1'),
      );
      await k(e(), ['apply', '-f', '-'], multiPodYaml('mr', 'macvlan-router'));
      await runningApp('multi', 2);
      expect(await k(e(), ['exec', 'mr', '--', 'ip', 'route', 'get', '10.100.200.1'])).toMatch(/dev eth0/);
      expect(await k(e(), ['exec', 'mr', '--', 'ip', 'route', 'get', '10.0.0.1'])).toMatch(/dev eth0/);
      expect(await k(e(), ['exec', 'mr', '--', 'ip', 'route', 'get', '203.0.113.1'])).toMatch(/dev net1/);
      expect((await ping(e(), { name: 'mr' } as PodInfo, '198.51.100.1')).stdout).toMatch(/2 packets received/);
      expect((await ping(e(), { name: 'mr' } as PodInfo, '10.0.0.1')).stdout).toMatch(/2 packets received/);
    });

    test('deleting the Multus pods leaves no link, rule or lease on the node', async () => {
      const node = e().lab.nodes[0]!;
      await k(e(), ['delete', 'pod', 'mv', 'mr', '--wait=true']);
      await backToSnapshot(node);
      for (const net of ['macvlan-veth', 'macvlan-router']) {
        const leases = nodeRun(node, ['sh', '-c', `ls /var/lib/cni/networks/${net} 2>/dev/null || true`])
          .split('\n')
          .filter((f) => /^\d+\./.test(f));
        expect({ net, leases }).toEqual({ net, leases: [] });
      }
    });

    test('coild gone from a node: STATUS fails through Multus, the node turns NotReady and a new pod waits; coild back: it starts', async () => {
      await k(e(), ['label', 'node', 'kl-a', 'coil-test=on', '--overwrite']);
      await patchCoild('merge', '{"spec":{"template":{"spec":{"nodeSelector":{"coil-test":"on"}}}}}');
      const c = await eventually('kl-b NotReady', async () => {
        const r = await readyCondition(e(), 'kl-b');
        return r?.status === 'False' ? r : undefined;
      });
      expect(c.message).toMatch(/coild/);
      await k(e(), ['apply', '-f', '-'], deploymentYaml('late', 1, 'kl-b'));
      const event = await eventually('a FailedScheduling event for the waiting pod', async () => {
        const ev = await k(e(), ['get', 'events', '--field-selector', 'reason=FailedScheduling', '-o', 'jsonpath={.items[*].message}']);
        return /untolerated taint/.test(ev) ? ev : undefined;
      });
      expect(event).toMatch(/untolerated taint/);
      expect((await podsIn(e(), 'default', 'app=late'))[0]?.phase).toBe('Pending');
      await patchCoild('json', '[{"op":"remove","path":"/spec/template/spec/nodeSelector"}]');
      await eventually('kl-b Ready', async () => (await readyCondition(e(), 'kl-b'))?.status === 'True', 240_000);
      const [late] = await runningApp('late', 1);
      expect(inPool(late!.ip)).toBe(true);
      await deleteApp('late');
    });

    test('a sandbox whose pause process died is re-created: the old attachment is torn down, the pod gets a new one', async () => {
      const node = e().lab.nodes[1]!;
      snapshot();
      await k(e(), ['apply', '-f', '-'], deploymentYaml('solo', 1, node.name));
      const [pod] = await runningApp('solo', 1);
      const sandboxes = (): { id: string; state: string }[] =>
        (JSON.parse(crictl(e().lab, node, ['pods', '--name', pod!.name, '-o', 'json'])) as { items: { id: string; state: string }[] })
          .items;
      const [old] = sandboxes();
      const pid = (JSON.parse(crictl(e().lab, node, ['inspectp', '-o', 'json', old!.id])) as { info: { pid: number } }).info.pid;
      process.kill(pid, 'SIGKILL');
      const fresh = await eventually('a new ready sandbox for the pod', async () =>
        sandboxes().find((sb) => sb.id !== old!.id && sb.state === 'SANDBOX_READY'),
      );
      expect(fresh.id).not.toBe(old!.id);
      const [again] = await runningApp('solo', 1);
      expect(again!.name).toBe(pod!.name);
      expect(inPool(again!.ip)).toBe(true);
      // one attachment on the node: the new sandbox's (the dead one's host veth and route are gone)
      await eventually('exactly one new link on the node', async () => {
        const extra = nodeNetState(node).links.filter((l) => !before.get(node.name)!.links.includes(l));
        if (extra.length === 1) return true;
        throw new Error(extra.join(' ') || 'none');
      });
      expect(nodeRun(node, ['ip', 'route', 'show', 'table', '116']).trim().split('\n')).toContainEqual(expect.stringContaining(again!.ip));
      await deleteApp('solo');
      await backToSnapshot(node);
    });

    test('containerd and kubelet restarted: running pods keep their sandboxes and addresses, and still talk', async () => {
      const node = e().lab.nodes[1]!;
      await k(e(), ['apply', '-f', '-'], deploymentYaml('keep', 2, node.name));
      const pods = await runningApp('keep', 2);
      const uids = async (): Promise<string> => k(e(), ['get', 'pods', '-l', 'app=keep', '-o', 'jsonpath={.items[*].metadata.uid}']);
      const uidsBefore = await uids();
      await restartInNode(e().lab, node, 'containerd');
      await restartInNode(e().lab, node, 'kubelet');
      await eventually(
        `${node.name} Ready after the restarts`,
        async () => (await readyCondition(e(), node.name))?.status === 'True',
        240_000,
      );
      // kubelet serves exec again once it is back (the Ready condition may still be the one from before the restart)
      const after = await runningApp('keep', 2);
      const r = await eventually('ping between the pods through the restarted kubelet', async () => {
        const res = await ping(e(), after[0]!, after[1]!.ip);
        if (res.code === 0) return res;
        throw new Error(res.stdout + res.stderr);
      });
      expect(r.stdout).toMatch(/2 packets received/);
      expect(after.map((p) => `${p.name} ${p.ip}`).sort()).toEqual(pods.map((p) => `${p.name} ${p.ip}`).sort());
      expect(await uids()).toBe(uidsBefore);
      expect(await k(e(), ['get', 'pods', '-l', 'app=keep', '-o', 'jsonpath={.items[*].status.containerStatuses[0].restartCount}'])).toBe(
        '0 0',
      );
      await deleteApp('keep');
    });

    test('down leaves nothing on the host', async () => {
      const leaks = await stopNodes(env);
      env = undefined;
      expect(leaks).toEqual([]);
    }, 240_000);
  },
);
