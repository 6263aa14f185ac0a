/**
 * Coil on two real nodes, installed as a user installs it: `npm run images -- coil` (imported into each node's
 * containerd: no registry), then `kubectl apply -f` of packages/coil/config/{crds,rbac,deploy}.yaml and an
 * AddressPool. Then the real Multus goes in front of Coil from its own DaemonSet manifest (image built from
 * shared/third_party/multus-cni), veth and router are installed by their DaemonSet (packages/meta/config/install.yaml)
 * and pods get a second network from the NetworkAttachmentDefinitions of packages/meta/config/nads.yaml. Everything is observed through kubectl and the nodes' kernels;
 * cross-node routes are the one part a user's BGP daemon would play (BIRD reading table 119, docs/coil.md): the
 * test copies them.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { attachmentKey } from '@cnikit/router/marks';
import { cloudFor } from '@cnikit/terway-testing';
import { cnitoolPath, REPO_ROOT } from '../lib/paths';
import { startEmulator } from '../../tools/node-lab/emulator';
import {
  crictl,
  HOST_IP,
  importImage,
  nodeLogTail,
  nodeRun,
  nodeTryRun,
  restartInNode,
  startInNode,
  type LabNode,
} from '../../tools/node-lab/lab';
import {
  buildImages,
  describeNodes,
  eventually,
  k,
  kubectl,
  nodePrerequisites,
  ping,
  multusImage,
  podsIn,
  podYaml,
  readyCondition,
  startNodes,
  stopNodes,
  TEST_CONTAINER,
  type NodeEnv,
  type PodInfo,
} from './lib';
import {
  cniCalls,
  containerPid,
  deleteApp,
  deploymentYaml,
  DOCTOR,
  exchangeRoutes,
  inPool,
  installCoil,
  NodeSnapshots,
  runningApp,
} from './coil-lib';

const META_CONFIG = path.join(REPO_ROOT, 'packages', 'meta', 'config');
const MULTUS_SRC = process.env.CNIKIT_MULTUS_SRC ?? path.join(REPO_ROOT, '..', 'shared', 'third_party', 'multus-cni');
let env: NodeEnv | undefined;
const e = (): NodeEnv => env!;

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

/**
 * Multus as its users install it: its own deployments/multus-daemonset.yml, applied unchanged, with the image
 * built from its source (multusImage). The thin DaemonSet copies the plugin into each node's /opt/cni/bin and
 * writes 00-multus.conflist around the node's first conflist (Coil's, cniVersion 1.1.0: STATUS and GC reach
 * Coil through it). The reference macvlan and host-local come with the node, as a distribution's
 * containernetworking-plugins package puts them there (Debian's, copied in).
 */
async function installMultus(env: NodeEnv): Promise<void> {
  importImage(env.lab, multusImage(env.lab));
  for (const node of env.lab.nodes) {
    for (const name of ['macvlan', 'host-local']) {
      fs.copyFileSync(`/usr/lib/cni/${name}`, path.join(node.cniBinDir, `.${name}.tmp`));
      fs.chmodSync(path.join(node.cniBinDir, `.${name}.tmp`), 0o755);
      fs.renameSync(path.join(node.cniBinDir, `.${name}.tmp`), path.join(node.cniBinDir, name));
    }
  }
  await k(env, ['apply', '-f', path.join(MULTUS_SRC, 'deployments', 'multus-daemonset.yml')]);
  await k(env, ['-n', 'kube-system', 'rollout', 'status', 'daemonset/kube-multus-ds', '--timeout=180s']);
  for (const node of env.lab.nodes) {
    await eventually(`Multus's conflist on ${node.name}`, async () => fs.existsSync(path.join(node.cniConfDir, '00-multus.conflist')));
  }
}

/** kubectl patch of coild's DaemonSet (to take it off a node and back). */
async function patchCoild(type: 'merge' | 'json', patch: string): Promise<void> {
  await k(e(), ['-n', 'kube-system', 'patch', 'ds', 'coild', '--type', type, '-p', patch]);
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
      await installCoil(e());
      for (const node of e().lab.nodes) {
        // the install step left the plugin (a link to the image's one executable) and the conflist, nothing else
        expect(nodeRun(node, ['ls', '-A', '/opt/cni/bin']).split('\n').filter(Boolean).sort()).toEqual(['cnikit-coil', 'coil', 'loopback']);
        expect(nodeRun(node, ['ls', '-A', '/etc/cni/net.d']).trim()).toBe('10-coil.conflist');
      }
      const coild = await podsIn(e(), 'kube-system', 'app.kubernetes.io/name=coild');
      expect(coild.map((p) => p.node).sort()).toEqual(['kl-a', 'kl-b']);
    });

    const snapshots = new NodeSnapshots();
    const snapshot = (): void => snapshots.take(e().lab.nodes);
    const backToSnapshot = (node: LabNode): Promise<void> => snapshots.backTo(node);

    test('30 pods get distinct Coil addresses and ping each other on one node and across nodes', async () => {
      snapshot();
      await k(e(), ['apply', '-f', '-'], deploymentYaml('web', 30));
      const pods = await runningApp(e(), 'web', 30);
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
      await deleteApp(e(), 'web');
      for (const node of e().lab.nodes) await backToSnapshot(node);
    });

    test('the real Multus in front of Coil: a pod gets net1 from macvlan + veth, reaching its node and a Service address through veth0', async () => {
      await installMultus(e());
      await k(e(), ['apply', '-f', path.join(META_CONFIG, 'install.yaml')]);
      for (const node of e().lab.nodes) {
        await eventually(`veth and router installed on ${node.name}`, async () =>
          ['veth', 'router'].every(
            (p) => fs.existsSync(path.join(node.cniBinDir, p)) && fs.readlinkSync(path.join(node.cniBinDir, p)) === 'cnikit-veth-router',
          ),
        );
      }
      snapshot();
      await k(e(), ['apply', '-f', path.join(META_CONFIG, 'nads.yaml')]);
      await k(e(), ['apply', '-f', '-'], multiPodYaml('mv', 'macvlan-veth'));
      await runningApp(e(), 'multi', 1);
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
      await k(e(), ['apply', '-f', '-'], multiPodYaml('mr', 'macvlan-router'));
      await runningApp(e(), 'multi', 2);
      expect(await k(e(), ['exec', 'mr', '--', 'ip', 'route', 'get', '10.100.200.1'])).toMatch(/dev eth0/);
      expect(await k(e(), ['exec', 'mr', '--', 'ip', 'route', 'get', '10.0.0.1'])).toMatch(/dev eth0/);
      expect(await k(e(), ['exec', 'mr', '--', 'ip', 'route', 'get', '203.0.113.1'])).toMatch(/dev net1/);
      expect((await ping(e(), { name: 'mr' } as PodInfo, '198.51.100.1')).stdout).toMatch(/2 packets received/);
      expect((await ping(e(), { name: 'mr' } as PodInfo, '10.0.0.1')).stdout).toMatch(/2 packets received/);
    });

    test('doctor node: the running pods healthy; a leak, a lost lease and a stray host veth planted by hand each named', async () => {
      const node = e().lab.nodes[0]!;
      const doctor = (): {
        ok: boolean;
        rows: { containerId: string; pod?: string; state: string; objects: string[]; problems: string[] }[];
      } => {
        const r = nodeTryRun(node, ['/opt/cni/bin/cnikit-coil', 'doctor', 'node', '-o', 'json', '--cri-socket', node.containerdSocket]);
        return { ok: r.ok, rows: (JSON.parse(r.stdout) as { attachments: [] }).attachments };
      };
      const clean = doctor();
      expect(clean.rows.filter((r) => r.state !== 'healthy')).toEqual([]);
      expect(clean.ok).toBe(true);
      const mv = clean.rows.find((r) => r.pod === 'default/mv')!;
      // Multus's caches: the runtime's entry for its own network, and one per delegate; veth's host end; the lease
      expect(mv.objects).toEqual(
        expect.arrayContaining([
          expect.stringMatching(/^cache multus-cni-network\/eth0 10\.100\./),
          expect.stringMatching(/^cache k8s-pod-network\/eth0 10\.100\./),
          expect.stringMatching(/^cache macvlan-veth\/net1 198\.51\.100\./),
          expect.stringMatching(/^lease macvlan-veth 198\.51\.100\./),
          expect.stringMatching(/^veth veth\w+ \(macvlan-veth\)$/),
          expect.stringMatching(/^coil veth\w+ eth0 10\.100\.\d+\.\d+ \(pool default\)$/),
        ]),
      );
      // router's host route of mr's net1, through mr's overlay peer (its Coil host veth), tied to it by its key
      const mr = clean.rows.find((r) => r.pod === 'default/mr')!;
      const mrRoute = mr.objects.find((o) => o.startsWith('router '))!;
      const [, mrIp, , mrLink, , mrTable] = mrRoute.replace(/[()]/g, '').split(' ');
      expect(mr.objects).toContainEqual(expect.stringMatching(new RegExp(`^coil ${mrLink} eth0 `)));
      expect(mrIp).toMatch(/^198\.51\.100\.\d+$/);
      // planted: what a pod gone behind the runtime's back leaves (cache entry, lease, host veth); mv's lease lost and
      // its route in Coil's table gone (Coil #370); mr's router host route gone
      const gone = 'deadbeef'.repeat(8);
      const cacheFile = `/var/lib/cni/results/k8s-pod-network-${gone}-eth0`;
      const entry = { kind: 'cniCacheV1', containerId: gone, ifName: 'eth0', networkName: 'k8s-pod-network', result: { ips: [] } };
      const mvLease = mv.objects.find((o) => o.startsWith('lease '))!.split(' ')[2]!;
      const leaseDir = '/var/lib/cni/networks/macvlan-veth';
      nodeRun(node, ['sh', '-ec', `echo '${JSON.stringify(entry)}' > ${cacheFile}; printf '${gone}\\nnet1' > ${leaseDir}/198.51.100.149`]);
      nodeRun(node, ['sh', '-ec', `mv ${leaseDir}/${mvLease} /tmp/doctor-lease`]);
      const mvIp = mv.objects.find((o) => o.startsWith('coil '))!.split(' ')[3]!;
      const mvRoute = nodeRun(node, ['ip', 'route', 'show', 'table', '116', `${mvIp}/32`]).trim();
      expect(mvRoute).toMatch(/dev veth/);
      nodeRun(node, ['ip', 'route', 'del', `${mvIp}/32`, 'table', '116']);
      const mrRouteLine = nodeRun(node, ['ip', 'route', 'show', 'table', mrTable!, `${mrIp}/32`, 'proto', '158']).trim();
      nodeRun(node, ['ip', 'route', 'del', `${mrIp}/32`, 'table', mrTable!, 'proto', '158']);
      nodeRun(node, [
        'sh',
        '-ec',
        `ip link add vethdoctor type veth peer name vethdoctor1; ip link set vethdoctor alias cnikit-veth:macvlan-veth:${gone}`,
      ]);
      try {
        const found = doctor();
        expect(found.ok).toBe(false);
        const leaked = found.rows.find((r) => r.containerId === gone)!;
        expect(leaked).toMatchObject({ state: 'leaked', problems: ['the runtime has no such sandbox'] });
        expect(leaked.objects.sort()).toEqual(
          ['cache k8s-pod-network/eth0', 'lease macvlan-veth 198.51.100.149', 'veth vethdoctor (macvlan-veth)'].sort(),
        );
        expect(found.rows.find((r) => r.pod === 'default/mv')).toMatchObject({
          state: 'broken',
          problems: [
            `k8s-pod-network/eth0: ${mvIp} has no route in Coil's table 116 (nothing on the node reaches the pod)`,
            `macvlan-veth/net1: ${mvLease} has no host-local lease (another pod may be given it)`,
          ],
        });
        expect(found.rows.find((r) => r.pod === 'default/mr')).toMatchObject({
          state: 'broken',
          problems: [`macvlan-router/net1: ${mrIp} has no router host route (router's CHECK fails; the node does not reach it)`],
        });
        expect(found.rows.filter((r) => r.state !== 'healthy').length).toBe(3);
      } finally {
        nodeRun(node, [
          'sh',
          '-c',
          `rm -f ${cacheFile} ${leaseDir}/198.51.100.149; mv /tmp/doctor-lease ${leaseDir}/${mvLease}; ip link del vethdoctor`,
        ]);
        nodeRun(node, ['sh', '-c', `ip route add table 116 ${mvRoute}`]);
        // `ip route show ... proto 158` leaves out what it filtered on: the protocol goes back by hand
        nodeRun(node, ['sh', '-c', `ip route add table ${mrTable} ${mrRouteLine} proto 158`]);
      }
      expect(doctor().ok).toBe(true);
    });

    test('doctor node --gc: what gone sandboxes left goes by DEL, GC and host-local release; a pod in the middle of its ADD keeps what it has', async () => {
      const node = e().lab.nodes[0]!;
      const doctor = (args: string[]): { ok: boolean; out: unknown } => {
        const r = nodeTryRun(node, [
          '/opt/cni/bin/cnikit-coil',
          'doctor',
          'node',
          '-o',
          'json',
          '--cri-socket',
          node.containerdSocket,
          ...args,
        ]);
        return { ok: r.ok, out: JSON.parse(r.stdout) };
      };
      type Row = { containerId: string; pod?: string; sandbox: string; state: string; objects: string[] };
      const rows = (): Row[] => (doctor([]).out as { attachments: Row[] }).attachments;
      // two pods gone behind the runtime's back, made by libcni's own client with the NAD's config: one whose ADD was
      // cached (its netns lives on: its host veth too), one whose ADD was killed before it was cached (entry removed)
      const confDir = path.join(node.dir, 'gc-conf');
      fs.mkdirSync(confDir, { recursive: true });
      const nad = await k(e(), ['get', 'net-attach-def', 'macvlan-veth', '-o', 'jsonpath={.spec.config}']);
      fs.writeFileSync(path.join(confDir, 'macvlan-veth.conflist'), nad);
      const cnitool = ['env', `NETCONFPATH=${confDir}`, 'CNI_PATH=/opt/cni/bin', 'CNI_IFNAME=net1', cnitoolPath()];
      for (const ns of ['gcleak1', 'gcleak2']) {
        nodeRun(node, ['ip', 'netns', 'add', ns]);
        nodeRun(node, [...cnitool, 'add', 'macvlan-veth', `/run/netns/${ns}`]);
      }
      const gone = rows().filter((r) => r.sandbox === 'gone');
      expect(gone.map((r) => r.objects.map((o) => o.split(' ')[0]).sort())).toEqual([
        ['cache', 'lease', 'veth'],
        ['cache', 'lease', 'veth'],
      ]);
      const killed = gone[1]!.containerId;
      nodeRun(node, ['rm', `/var/lib/cni/results/macvlan-veth-${killed}-net1`]);
      // and a Coil pod (coild's address and host veth) whose ADD was killed before it was cached, from the node's conflist
      nodeRun(node, ['ip', 'netns', 'add', 'gcleak3']);
      const coilAdd = ['env', 'NETCONFPATH=/etc/cni/net.d', 'CNI_PATH=/opt/cni/bin', 'CNI_ARGS=K8S_POD_NAMESPACE=default', cnitoolPath()];
      nodeRun(node, [...coilAdd, 'add', 'k8s-pod-network', '/run/netns/gcleak3']);
      const coilLeak = rows().find((r) => r.sandbox === 'gone' && r.objects.some((o) => o.startsWith('coil ')))!;
      expect(coilLeak.objects.map((o) => o.split(' ')[0]).sort()).toEqual(['cache', 'coil']);
      nodeRun(node, ['rm', `/var/lib/cni/results/k8s-pod-network-${coilLeak.containerId}-eth0`]);
      // veth's ADD held at a gate: a pod of the same network stays in the middle of its ADD (macvlan and its lease
      // done, nothing cached), which containerd's CRI does not list until the ADD is over
      const gate = path.join(node.dir, 'gc-gate');
      const vethBin = path.join(node.cniBinDir, 'veth');
      fs.rmSync(vethBin);
      fs.writeFileSync(
        vethBin,
        `#!/bin/sh\n[ "$CNI_COMMAND" != ADD ] || while [ ! -e ${gate} ]; do sleep 0.05; done\nexec /opt/cni/bin/cnikit-veth-router veth "$@"\n`,
        { mode: 0o755 },
      );
      try {
        // and a router host route whose DEL never came (its pod gone with its cache entry), beside mr's, through mr's peer
        const mrRoute = rows()
          .find((r) => r.pod === 'default/mr')!
          .objects.find((o) => o.startsWith('router '))!
          .split(' ');
        const routerKey = attachmentKey('macvlan-router', 'feedface'.repeat(8), 'net1');
        nodeRun(node, [
          'ip',
          'route',
          'add',
          '198.51.100.148/32',
          'dev',
          mrRoute[3]!,
          'proto',
          '158',
          'scope',
          'link',
          'metric',
          String(routerKey),
        ]);
        expect(rows().find((r) => r.containerId === `router-key:${routerKey}`)).toMatchObject({
          sandbox: 'gone',
          state: 'leaked',
          objects: [`router 198.51.100.148 via ${mrRoute[3]} (table 254)`],
        });
        const live = rows().filter((r) => r.sandbox !== 'gone');
        // the dry run names a DEL for the cached one, GC of the network and a lease release for the other; changes nothing
        const dry = doctor(['--gc']);
        expect(dry.ok).toBe(false);
        const steps = (dry.out as { steps: { step: string; network: string; target: string }[] }).steps;
        expect(steps.map((x) => `${x.step} ${x.network} ${x.target}`)).toEqual([
          `del macvlan-veth ${gone[0]!.containerId}`,
          'gc k8s-pod-network coil',
          'gc macvlan-router macvlan, router',
          'gc macvlan-veth macvlan, veth',
          `release macvlan-veth ${killed}`,
        ]);
        expect(rows().filter((r) => r.sandbox === 'gone').length).toBe(4);
        await k(e(), ['apply', '-f', '-'], multiPodYaml('mg', 'macvlan-veth'));
        const creating = await eventually(
          'the new pod in the middle of its ADD, holding its lease',
          async () => rows().find((r) => r.sandbox === 'creating' && r.objects.some((o) => o.startsWith('lease macvlan-veth '))),
          60_000,
        );
        expect(creating.state).toBe('healthy');
        expect(crictl(e().lab, node, ['pods', '-q']).split('\n')).not.toContain(creating.containerId);
        const applied = doctor(['--gc', '--apply']);
        expect(applied.out).toMatchObject({ applied: true, after: [] });
        expect((applied.out as { steps: { ok: boolean }[] }).steps.map((x) => x.ok)).toEqual([true, true, true, true, true]);
        expect(applied.ok).toBe(true);
        expect(rows().find((r) => r.containerId === creating.containerId)?.objects).toEqual(creating.objects);
        nodeRun(node, ['touch', gate]);
        await runningApp(e(), 'multi', 3);
        expect(doctor(['--gc', '--apply'])).toMatchObject({ ok: true, out: { steps: [] } });
        // nothing of the runtime's pods was touched: the same rows as before, plus mg's, all healthy; mg reaches its node
        const after = rows();
        expect(after.filter((r) => r.state !== 'healthy')).toEqual([]);
        expect(after.filter((r) => r.pod !== 'default/mg')).toEqual(live);
        const mg = after.find((r) => r.pod === 'default/mg')!;
        expect(mg.containerId).toBe(creating.containerId);
        expect(mg.objects).toEqual(expect.arrayContaining([expect.stringMatching(/^veth veth\w+ \(macvlan-veth\)$/), ...creating.objects]));
        expect((await ping(e(), { name: 'mg' } as PodInfo, '198.51.100.11')).stdout).toMatch(/2 packets received/);
      } finally {
        nodeRun(node, [
          'sh',
          '-c',
          `touch ${gate}; ip netns del gcleak1; ip netns del gcleak2; ip netns del gcleak3; ip route del 198.51.100.148/32 proto 158; true`,
        ]);
        fs.rmSync(vethBin, { force: true });
        fs.symlinkSync('cnikit-veth-router', vethBin);
        fs.rmSync(gate, { force: true });
        fs.rmSync(confDir, { recursive: true, force: true });
        // not k(): a failed clean-up must not hide the failure that brought the test here
        await kubectl(e(), ['delete', 'pod', 'mg', '--ignore-not-found', '--wait=true', '--timeout=120s']);
      }
    });

    test("doctor pod: a running pod has its network; a pod asking for a network whose plugin is missing gets the runtime's CNI error", async () => {
      const node = e().lab.nodes[0]!;
      const doctorPod = (ref: string): { ok: boolean; stdout: string } =>
        nodeTryRun(node, [...DOCTOR, 'pod', ref, '--kubeconfig', e().cluster.kubeconfig, '--cri-socket', node.containerdSocket]);
      const mv = doctorPod('default/mv');
      expect(mv.stdout.split('\n')[0]).toMatch(/^default\/mv: has its network: 10\.100\.\d+\.\d+ \(sandbox \w+\)$/);
      expect(mv.stdout).toMatch(/status: multus-cni-network\/multus: ok/);
      expect(mv.ok).toBe(true);
      const nad = {
        apiVersion: 'k8s.cni.cncf.io/v1',
        kind: 'NetworkAttachmentDefinition',
        metadata: { name: 'broken', namespace: 'default' },
        spec: { config: JSON.stringify({ cniVersion: '1.0.0', name: 'broken', plugins: [{ type: 'nope' }] }) },
      };
      await k(e(), ['apply', '-f', '-'], JSON.stringify(nad));
      await k(e(), ['apply', '-f', '-'], multiPodYaml('stuck', 'broken'));
      try {
        const why = await eventually("doctor pod naming the runtime's CNI error", async () => {
          const r = doctorPod('default/stuck');
          return !r.ok && /^default\/stuck: the runtime's CNI ADD fails: .*"nope"/.test(r.stdout) ? r.stdout : undefined;
        });
        expect(why).toMatch(/\n {2}event: Warning FailedCreatePodSandBox \(x\d+, /);
        expect(why).toMatch(/\n {2}status: multus-cni-network\/multus: ok\n/);
      } finally {
        await kubectl(e(), ['delete', 'pod', 'stuck', '--ignore-not-found', '--wait=true', '--timeout=120s']);
        await kubectl(e(), ['delete', 'net-attach-def', 'broken', '--ignore-not-found']);
      }
    });

    test("doctor node --cloud on a node: the terway image's doctor reads terway's ENIs from ECS (the Alibaba Cloud emulator) with the cloud client it carries as a lazy module; the coil image's doctor does not carry it and says so", async () => {
      const node = e().lab.nodes[0]!;
      const terwayDoctor = [path.join(path.dirname(buildImages(['terway']).terway!), 'bin', 'cnikit-terway'), 'doctor'];
      const keys = { id: 'LTAI-lab', secret: 'lab-secret' };
      const emu = await startEmulator(REPO_ROOT, 'aliyun-emulator', [
        ...['--listen', `${HOST_IP}:0`, '--access-key', `${keys.id}=${keys.secret}`],
        ...['--vswitch', 'vsw-lab/cn-hangzhou-i=10.1.0.0/24', '--instance-type', 'ecs.g7.large=3,10'],
        ...['--instance', 'i-lab:ecs.g7.large:vsw-lab'],
      ]);
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'terway-state-'));
      const calls = async (): Promise<number> =>
        ((await (await fetch(`http://${emu.url}/_emulator/state`)).json()) as { calls: number }).calls;
      try {
        // an ENI with two addresses, as terwayd makes one; both leases held by sandboxes the node no longer has
        const ecs = cloudFor({ endpoint: emu.url }, { instanceId: 'i-lab', accessKeyId: keys.id, accessKeySecret: keys.secret });
        const eni = await ecs.createEni({ vswitchId: 'vsw-lab', securityGroups: ['sg-1'], ipCount: 2 });
        const state = path.join(dir, 'pod.json');
        fs.writeFileSync(state, JSON.stringify({ leases: eni.ips.map((ip, i) => ({ ip, eniId: eni.eniId, containerId: `gone${i}` })) }));
        const doctor = (exe: string[], secret: string): { attachments: { containerId: string; state: string }[]; unreadable: string[] } => {
          const r = nodeTryRun(node, [
            ...['env', `ALIBABA_CLOUD_ACCESS_KEY_ID=${keys.id}`, `ALIBABA_CLOUD_ACCESS_KEY_SECRET=${secret}`],
            ...[...exe, 'node', '-o', 'json', '--cri-socket', node.containerdSocket, '--terway-state', state, '--cloud'],
            ...['--aliyun-metadata', `http://${emu.url}`, '--aliyun-endpoint', `http://${emu.url}`],
          ]);
          if (!r.stdout.startsWith('{')) throw new Error(`doctor node printed no report: ${r.out}`);
          return JSON.parse(r.stdout) as { attachments: { containerId: string; state: string }[]; unreadable: string[] };
        };
        const ecsRows = (u: string[]): string[] => u.filter((x) => x.startsWith('ECS'));
        const before = await calls();
        const read = doctor(terwayDoctor, keys.secret);
        expect(ecsRows(read.unreadable)).toEqual([]);
        expect(await calls()).toBeGreaterThan(before); // the metadata service and DescribeNetworkInterfaces answered
        expect(read.attachments.filter((r) => r.containerId.startsWith('gone')).map((r) => [r.containerId, r.state])).toEqual([
          ['gone0', 'leaked'],
          ['gone1', 'leaked'],
        ]);
        // ECS refusing the signature: an unreadable source named with ECS's error, judging nothing
        expect(ecsRows(doctor(terwayDoctor, 'wrong-secret').unreadable)).toEqual([
          expect.stringMatching(/^ECS \(the ENIs of terwayd's leases\): .*SignatureDoesNotMatch/),
        ]);
        // the coil image's doctor carries no Alibaba Cloud client: it asks nothing and says which image does
        const asked = await calls();
        expect(ecsRows(doctor(DOCTOR, keys.secret).unreadable)).toEqual([
          "ECS (the ENIs of terwayd's leases): lazy/packages/terway/src/cloud/node-enis.ts: not in this executable; the terway image carries it",
        ]);
        expect(await calls()).toBe(asked);
      } finally {
        await emu.stop();
        fs.rmSync(dir, { recursive: true, force: true });
      }
    });

    test("doctor serve: the node's metrics, with our plugins' ADD and DEL latencies from the call log; gone, it leaves no log behind", async () => {
      const node = e().lab.nodes[0]!;
      const argv = [...DOCTOR, 'serve', '--listen', '127.0.0.1:9402', '--interval', '1', '--cri-socket', node.containerdSocket];
      const pid = startInNode(e().lab, node, 'doctor-serve', argv);
      const fetchMetrics = "fetch('http://127.0.0.1:9402/metrics').then((r) => r.text()).then((t) => process.stdout.write(t))";
      const metrics = (): string => {
        const r = nodeTryRun(node, [process.execPath, '-e', fetchMetrics]);
        return r.ok ? r.stdout : '';
      };
      const has = (t: string, series: string): boolean => new RegExp(`^${series.replace(/[{}"]/g, (c) => `\\${c}`)} [1-9]`, 'm').test(t);
      try {
        await eventually('the first round served', async () => has(metrics(), 'cnikit_attachments{state="healthy"}'));
        await k(e(), ['apply', '-f', '-'], multiPodYaml('mm', 'macvlan-veth'));
        await runningApp(e(), 'multi', 3);
        await k(e(), ['delete', 'pod', 'mm', '--wait=true']);
        const t = await eventually("veth's and coil's ADD and DEL counted", async () => {
          const text = metrics();
          const series = ['veth', 'coil'].flatMap((p) =>
            ['ADD', 'DEL'].map((c) => `cnikit_cni_call_duration_seconds_count{plugin="${p}",command="${c}",result="ok"}`),
          );
          return series.every((x) => has(text, x)) ? text : undefined;
        });
        expect(t).toMatch(/^cnikit_status_ok\{network="multus-cni-network",plugin="multus"\} 1$/m);
        expect(t).toMatch(/^cnikit_attachments\{state="leaked"\} 0$/m);
        expect(t).toMatch(/^cnikit_plugin_attachments\{plugin="veth"\} [1-9]/m);
        expect(t).toMatch(/^cnikit_cni_call_duration_seconds_bucket\{le="30",plugin="veth",command="ADD",result="ok"\} [1-9]/m);
      } finally {
        process.kill(pid, 'SIGTERM');
        await eventually(
          'doctor serve stopped',
          async () => !fs.existsSync(`/proc/${pid}`) || fs.readFileSync(`/proc/${pid}/stat`, 'utf8').includes(') Z'),
        );
      }
      expect(nodeTryRun(node, ['test', '-e', '/var/lib/cni/cnikit/calls']).ok).toBe(false);
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

    test("doctor conf, the image's own program on the node: Multus's conflist is the one used, every plugin speaks its 1.1.0", async () => {
      const node = e().lab.nodes[0]!;
      // cni-install left the image's executable in the node's bin dir: the same program `kubectl exec` would run
      const args = ['/opt/cni/bin/cnikit-coil', 'doctor', 'conf', '-o', 'json', '--kubeconfig', e().cluster.kubeconfig];
      const out = JSON.parse(nodeRun(node, args)) as {
        nads: { file: string; cniVersion: string; plugins: { type: string }[]; findings: unknown[] }[];
        files: {
          file: string;
          used: boolean;
          cniVersion: string;
          plugins: { type: string; supportedVersions: string[] }[];
          findings: unknown[];
        }[];
      };
      const used = out.files.filter((f) => f.used);
      expect(used.map((f) => path.basename(f.file))).toEqual(['00-multus.conflist']);
      expect(used[0]!.cniVersion).toBe('1.1.0');
      expect(used[0]!.plugins.map((p) => p.type)).toEqual(['multus']);
      expect(used[0]!.findings).toEqual([]);
      const coil = out.files.find((f) => path.basename(f.file) === '10-coil.conflist')!;
      expect(coil.plugins[0]!.supportedVersions).toContain('1.1.0');
      // packages/meta/config/nads.yaml, read from the API server: Debian's macvlan + our veth / router at 1.0.0
      expect(out.nads.map((n) => `${n.file} ${n.cniVersion} ${n.plugins.map((p) => p.type).join(',')} ${n.findings.length}`)).toEqual([
        'NetworkAttachmentDefinition default/macvlan-router 1.0.0 macvlan,router 0',
        'NetworkAttachmentDefinition default/macvlan-veth 1.0.0 macvlan,veth 0',
      ]);
      // a conflist chaining Debian's portmap at 1.1.0 (what docs/coil.md once said): exit 1, portmap named
      const dir = path.join(node.dir, 'doctor-conf');
      fs.mkdirSync(dir, { recursive: true });
      fs.copyFileSync('/usr/lib/cni/portmap', path.join(node.cniBinDir, 'portmap'));
      const bad = {
        cniVersion: '1.1.0',
        name: 'k8s-pod-network',
        plugins: [
          { type: 'coil', socket: '/run/coild.sock' },
          { type: 'portmap', capabilities: { portMappings: true } },
        ],
      };
      fs.writeFileSync(path.join(dir, '10-coil.conflist'), JSON.stringify(bad));
      const r = nodeTryRun(node, ['/opt/cni/bin/cnikit-coil', 'doctor', 'conf', '--conf-dir', dir]);
      fs.rmSync(dir, { recursive: true });
      fs.rmSync(path.join(node.cniBinDir, 'portmap'));
      expect(r.ok).toBe(false);
      expect(r.stdout).toMatch(/error: portmap: speaks CNI .*1\.0\.0, not the network's 1\.1\.0: the runtime's STATUS fails/);
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
      const [late] = await podsIn(e(), 'default', 'app=late');
      expect(late?.phase).toBe('Pending');
      // doctor pod on the node the pod wants: not scheduled, and the evidence why (STATUS fails through Multus)
      const kb = e().lab.nodes[1]!;
      const why = nodeTryRun(kb, [
        ...DOCTOR,
        'pod',
        `default/${late!.name}`,
        '--kubeconfig',
        e().cluster.kubeconfig,
        '--cri-socket',
        kb.containerdSocket,
      ]);
      expect(why.ok).toBe(false);
      expect(why.stdout).toMatch(new RegExp(`^default/${late!.name}: not scheduled: .*untolerated taint`));
      expect(why.stdout).toMatch(/\n {2}status: multus-cni-network\/multus: FAILED code \d+: .*coild/);
      await patchCoild('json', '[{"op":"remove","path":"/spec/template/spec/nodeSelector"}]');
      await eventually('kl-b Ready', async () => (await readyCondition(e(), 'kl-b'))?.status === 'True', 240_000);
      const [running] = await runningApp(e(), 'late', 1);
      expect(inPool(running!.ip)).toBe(true);
      await deleteApp(e(), 'late');
    });

    test('a pod deleted while its ADD waits on a stalled coild: the ADD carries the pod in CNI_ARGS, and nothing leaks', async () => {
      const node = e().lab.nodes[1]!;
      snapshot();
      const coild = containerPid(e(), node, 'coild');
      process.kill(coild, 'SIGSTOP');
      try {
        await k(e(), ['apply', '-f', '-'], podYaml('brief', node.name));
        const add = await eventually('coil ADD for the pod running on the node', async () =>
          cniCalls().find((c) => c.env.CNI_COMMAND === 'ADD' && c.args.K8S_POD_NAME === 'brief'),
        );
        const uid = await k(e(), ['get', 'pod', 'brief', '-o', 'jsonpath={.metadata.uid}']);
        expect(add.args).toEqual(
          expect.objectContaining({ K8S_POD_NAMESPACE: 'default', K8S_POD_UID: uid, K8S_POD_INFRA_CONTAINER_ID: add.env.CNI_CONTAINERID }),
        );
        await k(e(), ['delete', 'pod', 'brief', '--wait=false']);
        await eventually('the pod marked for deletion', async () =>
          k(e(), ['get', 'pod', 'brief', '-o', 'jsonpath={.metadata.deletionTimestamp}']),
        );
        // From here the runtime may kill the waiting ADD (kubelet gives up the sandbox's creation and containerd
        // runs plugins under that request's context) or let it finish once coild answers: either way, nothing
        // may be left behind.
      } finally {
        process.kill(coild, 'SIGCONT');
      }
      await k(e(), ['wait', '--for=delete', 'pod/brief', '--timeout=180s']);
      await backToSnapshot(node);
      // the stopped sandbox may stay listed until kubelet's garbage collection; none is ready
      expect(crictl(e().lab, node, ['pods', '--name', 'brief', '--state', 'ready', '-q']).trim()).toBe('');
      expect(cniCalls().filter((c) => c.args.K8S_POD_NAME === 'brief')).toEqual([]);
    });

    test('a sandbox whose pause process died is re-created: the old attachment is torn down, the pod gets a new one', async () => {
      const node = e().lab.nodes[1]!;
      snapshot();
      await k(e(), ['apply', '-f', '-'], deploymentYaml('solo', 1, node.name));
      const [pod] = await runningApp(e(), 'solo', 1);
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
      const freshIp = (JSON.parse(crictl(e().lab, node, ['inspectp', '-o', 'json', fresh.id])) as { status: { network: { ip: string } } })
        .status.network.ip;
      expect(inPool(freshIp)).toBe(true);
      // the pod's status follows the new sandbox once kubelet's next sync reports it
      const again = await eventually("the pod's status showing the new sandbox's address", async () =>
        (await runningApp(e(), 'solo', 1)).find((p) => p.ip === freshIp),
      );
      expect(again.name).toBe(pod!.name);
      // one attachment on the node: the new sandbox's (the dead one's host veth and route are gone)
      await eventually('exactly one new link on the node', async () => {
        const extra = snapshots.newLinks(node);
        if (extra.length === 1) return true;
        throw new Error(extra.join(' ') || 'none');
      });
      expect(nodeRun(node, ['ip', 'route', 'show', 'table', '116']).trim().split('\n')).toContainEqual(expect.stringContaining(again.ip));
      await deleteApp(e(), 'solo');
      await backToSnapshot(node);
    });

    test('containerd and kubelet restarted: running pods keep their sandboxes and addresses, and still talk', async () => {
      const node = e().lab.nodes[1]!;
      await k(e(), ['apply', '-f', '-'], deploymentYaml('keep', 2, node.name));
      const pods = await runningApp(e(), 'keep', 2);
      const uids = async (): Promise<string> => k(e(), ['get', 'pods', '-l', 'app=keep', '-o', 'jsonpath={.items[*].metadata.uid}']);
      const uidsBefore = await uids();
      await restartInNode(e().lab, node, 'containerd');
      await restartInNode(e().lab, node, 'kubelet');
      // the daemons' last words go into a failure message (the lab dir is gone by the time anyone reads it)
      const logs = (): string => ['containerd', 'kubelet'].map((d) => `--- ${d}:\n${nodeLogTail(e().lab, node, d, 15)}`).join('\n');
      await eventually(
        `${node.name} Ready after the restarts`,
        async () => {
          if ((await readyCondition(e(), node.name))?.status === 'True') return true;
          throw new Error(logs());
        },
        240_000,
      );
      // kubelet serves exec again once it is back (the Ready condition may still be the one from before the restart)
      const after = await runningApp(e(), 'keep', 2);
      const r = await eventually('ping between the pods through the restarted kubelet', async () => {
        const res = await ping(e(), after[0]!, after[1]!.ip);
        if (res.code === 0) return res;
        throw new Error(`${res.stdout}${res.stderr}\n${logs()}`);
      });
      expect(r.stdout).toMatch(/2 packets received/);
      expect(after.map((p) => `${p.name} ${p.ip}`).sort()).toEqual(pods.map((p) => `${p.name} ${p.ip}`).sort());
      expect(await uids()).toBe(uidsBefore);
      expect(await k(e(), ['get', 'pods', '-l', 'app=keep', '-o', 'jsonpath={.items[*].status.containerStatuses[0].restartCount}'])).toBe(
        '0 0',
      );
      await deleteApp(e(), 'keep');
    });

    test('down leaves nothing on the host', async () => {
      const leaks = await stopNodes(env);
      env = undefined;
      expect(leaks).toEqual([]);
    }, 240_000);
  },
);
