/**
 * Coil on two real nodes under the faults its users meet (issue "cnikit doctor", point 6): a plugin killed in the
 * middle of its ADD, a pod deleted while containerd is stopped, and a churn of 200 pods with coild killed,
 * containerd restarted and the API server restarted while pods come and go. After each, the image's own doctor
 * on every node reports no leaked, broken or conflicting attachment, and nothing the test's pods made is left
 * in the nodes' kernels. The churn's faults are drawn from a seed (CNIKIT_CHURN_SEED replays a run) and its
 * figures are printed.
 */
import { restartApiServer } from '@cnikit/kube-testing';
import { crictl, importImage, nodeTryRun, restartInNode, startAgainInNode, stopInNode, type LabNode } from '../../tools/node-lab/lab';
import {
  buildImages,
  describeNodes,
  eventually,
  k,
  kjson,
  kubectl,
  nodePrerequisites,
  ping,
  podsIn,
  podYaml,
  startNodes,
  stopNodes,
  type KObject,
  type NodeEnv,
} from './lib';
import {
  cniCalls,
  containerPid,
  deleteApp,
  deploymentYaml,
  doctorNode,
  DOCTOR,
  exchangeRoutes,
  inPool,
  installCoil,
  NodeSnapshots,
  runningApp,
  type DoctorRow,
} from './coil-lib';

let env: NodeEnv | undefined;
const e = (): NodeEnv => env!;
const snapshots = new NodeSnapshots();

/** Rows of a node's doctor that are not healthy: what a test expects to be none. */
const unhealthy = (node: LabNode): DoctorRow[] => (doctorNode(node).out.attachments ?? []).filter((r) => r.state !== 'healthy');

/** `doctor cluster -o json` (extra: --gc, --apply), run on a node with the admin kubeconfig as an operator would. */
function doctorCluster(extra: string[] = []): { ok: boolean; out: Record<string, unknown> } {
  const r = nodeTryRun(e().lab.nodes[0]!, [...DOCTOR, 'cluster', '-o', 'json', '--kubeconfig', e().cluster.kubeconfig, ...extra]);
  if (!r.stdout) throw new Error(`doctor cluster printed nothing: ${r.out}`);
  return { ok: r.ok, out: JSON.parse(r.stdout) as Record<string, unknown> };
}

/** The sandboxes the node's CRI lists for a pod name (any state). */
function sandboxesOf(node: LabNode, pod: string): { id: string; state: string }[] {
  return (JSON.parse(crictl(e().lab, node, ['pods', '--name', `^${pod}$`, '-o', 'json'])) as { items: { id: string; state: string }[] })
    .items;
}

const WAVE = 40;
const FAULTS = ['kill -9 coild', 'restart containerd', 'apiserver', 'kill -9 coild', 'restart containerd'] as const;
type Fault = (typeof FAULTS)[number];
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** mulberry32: a seeded generator, so a failing churn can be replayed with the seed it printed. */
function seeded(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function shuffle<T>(random: () => number, items: T[]): T[] {
  for (let i = items.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [items[i], items[j]] = [items[j]!, items[i]!];
  }
  return items;
}

/** One fault, as it happens on a real node: the daemon dies (the kubelet restarts its container), or an operator restarts a service. */
async function inject(env: NodeEnv, fault: Fault, node: LabNode): Promise<void> {
  if (fault === 'kill -9 coild') process.kill(containerPid(env, node, 'coild'), 'SIGKILL');
  else if (fault === 'restart containerd') await restartInNode(env.lab, node, 'containerd');
  else await restartApiServer(env.cluster);
}

/**
 * Samples the cluster's pods every second while the churn runs and records any address held by two Running pods
 * that are not being deleted (a deleted pod's status keeps its address for a while after its sandbox is gone).
 */
function watchDuplicates(env: NodeEnv): { stop: () => Promise<void>; samples: number; duplicates: string[] } {
  const w = { stop: (): Promise<void> => Promise.resolve(), samples: 0, duplicates: [] as string[] };
  let stopped = false;
  const loop = async (): Promise<void> => {
    while (!stopped) {
      const list = await kjson(env, ['get', 'pods', '-A']).catch(() => undefined); // the API server may be restarting
      if (list) {
        w.samples++;
        const holders = new Map<string, string[]>();
        for (const p of list.items) {
          const ip = p.status?.podIP;
          if (p.status?.phase !== 'Running' || !ip || !inPool(ip) || p.metadata.deletionTimestamp) continue;
          holders.set(ip, [...(holders.get(ip) ?? []), p.metadata.name]);
        }
        for (const [ip, names] of holders) if (names.length > 1) w.duplicates.push(`${ip}: ${names.join(', ')}`);
      }
      await sleep(1000);
    }
  };
  const done = loop();
  w.stop = () => {
    stopped = true;
    return done;
  };
  return w;
}

describeNodes('node: Coil on two real nodes under faults; doctor finds what they leave', nodePrerequisites(), () => {
  beforeAll(async () => {
    const images = buildImages(['coil']);
    env = await startNodes(2, 'none');
    importImage(env.lab, images.coil!);
  }, 3_600_000);

  afterAll(async () => {
    await stopNodes(env);
    env = undefined;
  }, 240_000);

  test('Coil from its manifests: the nodes turn Ready', async () => {
    await installCoil(e());
    for (const node of e().lab.nodes) expect(unhealthy(node)).toEqual([]);
    // one block per node that asked for one (two leading controllers once carved two for one BlockRequest)
    const cluster = doctorCluster();
    expect(cluster.ok).toBe(true);
    const [pool] = cluster.out.pools as { byNode: Record<string, number> }[];
    expect(Object.values(pool!.byNode).every((n) => n === 1)).toBe(true);
  });

  test('kill -9 of the coil plugin in the middle of its ADD: the runtime tears the attempt down and tries again, the pod starts, nothing leaks', async () => {
    const node = e().lab.nodes[1]!;
    snapshots.take(e().lab.nodes);
    const coild = containerPid(e(), node, 'coild');
    // coild stalled: the plugin waits on its answer, so the kill lands while the ADD is under way
    process.kill(coild, 'SIGSTOP');
    let killed: string;
    try {
      await k(e(), ['apply', '-f', '-'], podYaml('killed', node.name));
      // the coil plugin's own process (the runtime also runs loopback's ADD for the pod, and fast)
      const add = await eventually('the coil ADD of the pod running on the node', async () =>
        cniCalls().find((c) => c.plugin === 'coil' && c.env.CNI_COMMAND === 'ADD' && c.args.K8S_POD_NAME === 'killed'),
      );
      killed = add.env.CNI_CONTAINERID!;
      process.kill(add.pid, 'SIGKILL');
    } finally {
      process.kill(coild, 'SIGCONT');
    }
    const ip = await eventually(
      'the pod Running with an address',
      async () => {
        const pod = await kjson<KObject>(e(), ['get', 'pod', 'killed']);
        return pod.status?.phase === 'Running' ? pod.status.podIP : undefined;
      },
      180_000,
    );
    expect(inPool(ip)).toBe(true);
    // the kill is what failed the first attempt, as the kubelet reports it
    const events = await k(e(), [
      'get',
      'events',
      '--field-selector',
      'involvedObject.name=killed,reason=FailedCreatePodSandBox',
      '-o',
      'jsonpath={.items[*].message}',
    ]);
    expect(events).toMatch(/plugin type="coil" failed \(add\).*signal: killed/);
    // the killed attempt's sandbox is gone (or stopped) and holds nothing; the new one is healthy
    await eventually('doctor node: every attachment healthy, none of the killed attempt', async () => {
      const rows = doctorNode(node).out.attachments ?? [];
      const bad = rows.filter((r) => r.state !== 'healthy' || r.containerId === killed);
      if (bad.length === 0) return rows;
      throw new Error(JSON.stringify(bad));
    });
    expect(
      sandboxesOf(node, 'killed')
        .filter((s) => s.state === 'SANDBOX_READY')
        .map((s) => s.id),
    ).not.toContain(killed!);
    await k(e(), ['delete', 'pod', 'killed', '--wait=true']);
    await snapshots.backTo(node);
  });

  test("a pod deleted while the node's containerd is stopped: once containerd is back, its sandbox and network go, nothing leaks", async () => {
    const node = e().lab.nodes[1]!;
    snapshots.take(e().lab.nodes);
    await k(e(), ['apply', '-f', '-'], podYaml('orphan', node.name));
    await eventually('the pod Running', async () =>
      (await kjson<KObject>(e(), ['get', 'pod', 'orphan'])).status?.phase === 'Running' ? true : undefined,
    );
    const [sandbox] = sandboxesOf(node, 'orphan');
    await stopInNode(e().lab, node, 'containerd');
    try {
      // the API object goes at once; the kubelet cannot reach the runtime to stop the pod
      await k(e(), ['delete', 'pod', 'orphan', '--grace-period=0', '--force', '--wait=false']);
      await eventually(
        'the pod gone from the API',
        async () => (await kjson(e(), ['get', 'pods', '--field-selector', 'metadata.name=orphan'])).items.length === 0,
      );
    } finally {
      await startAgainInNode(e().lab, node, 'containerd');
    }
    await eventually(
      "the orphan's sandbox stopped and its network gone",
      async () => {
        const rows = (doctorNode(node).out.attachments ?? []).filter((r) => r.containerId === sandbox!.id);
        const ready = sandboxesOf(node, 'orphan').some((s) => s.state === 'SANDBOX_READY');
        if (!ready && rows.length === 0) return true;
        throw new Error(`ready: ${ready}; doctor: ${JSON.stringify(rows)}`);
      },
      180_000,
    );
    expect(unhealthy(node)).toEqual([]);
    await snapshots.backTo(node);
  });
  test("a Coil block whose node went while Coil's controller was down: doctor cluster names it, --gc --apply deletes it, nothing else", async () => {
    // a node as the API knows it, given a block by Coil's controller the way coild asks for one
    await k(e(), ['apply', '-f', '-'], JSON.stringify({ apiVersion: 'v1', kind: 'Node', metadata: { name: 'kl-gone' } }));
    const request = {
      apiVersion: 'coil.cybozu.com/v2',
      kind: 'BlockRequest',
      metadata: { name: 'kl-gone-0' },
      spec: { nodeName: 'kl-gone', poolName: 'default' },
    };
    await k(e(), ['create', '-f', '-'], JSON.stringify(request));
    const blocks = async (): Promise<string[]> =>
      (
        await k(e(), [
          'get',
          'addressblocks',
          '-o',
          'jsonpath={range .items[*]}{.metadata.name} {.metadata.labels.coil\\.cybozu\\.com/node}{"\\n"}{end}',
        ])
      )
        .split('\n')
        .filter(Boolean);
    const ghost = await eventually('the block of kl-gone', async () => (await blocks()).find((b) => b.endsWith(' kl-gone'))?.split(' ')[0]);
    await k(e(), ['-n', 'kube-system', 'scale', 'deployment/coil-ipam-controller', '--replicas=0']);
    try {
      await eventually(
        'no coil-ipam-controller pod',
        async () => (await podsIn(e(), 'kube-system', 'app.kubernetes.io/name=coil-ipam-controller')).length === 0,
      );
      await k(e(), ['delete', 'node', 'kl-gone']);
      const others = (await blocks()).filter((b) => !b.endsWith(' kl-gone'));
      const found = doctorCluster();
      expect(found.ok).toBe(false);
      expect(found.out.leakedBlocks).toEqual([expect.objectContaining({ name: ghost, pool: 'default', node: 'kl-gone' })]);
      expect(found.out.pools).toEqual([expect.objectContaining({ pool: 'default', blocks: others.length + 1, capacity: 2048 })]);
      const dry = doctorCluster(['--gc']);
      expect(dry).toMatchObject({ ok: false, out: { applied: false, steps: [] } });
      expect(await blocks()).toContain(`${ghost} kl-gone`);
      const applied = doctorCluster(['--gc', '--apply']);
      expect(applied).toMatchObject({ ok: true, out: { applied: true, steps: [{ block: ghost, ok: true }], after: { leakedBlocks: [] } } });
      expect((await blocks()).sort()).toEqual(others.sort());
    } finally {
      await k(e(), ['-n', 'kube-system', 'scale', 'deployment/coil-ipam-controller', '--replicas=2']);
      await kubectl(e(), ['delete', 'blockrequest', 'kl-gone-0', '--ignore-not-found']);
      await kubectl(e(), ['delete', 'node', 'kl-gone', '--ignore-not-found']);
    }
    await k(e(), ['-n', 'kube-system', 'rollout', 'status', 'deployment/coil-ipam-controller', '--timeout=180s']);
    expect(doctorCluster().ok).toBe(true);
  });

  test('200 pods churned on both nodes while coild is killed, containerd restarted and the API server restarted: 0 leaks, 0 duplicate IPs', async () => {
    snapshots.take(e().lab.nodes);
    const seed = Number(process.env.CNIKIT_CHURN_SEED ?? Date.now() % 1_000_000);
    console.log(`churn seed ${seed} (CNIKIT_CHURN_SEED=${seed} replays this plan)`);
    const random = seeded(seed);
    const plan = shuffle(random, [...FAULTS]).map((fault) => ({
      fault,
      node: e().lab.nodes[Math.floor(random() * 2)]!,
      delayMs: Math.floor(random() * 4000),
    }));
    const watch = watchDuplicates(e());
    const created: number[] = [];
    try {
      for (const [i, step] of plan.entries()) {
        const t0 = Date.now();
        await k(e(), ['apply', '-f', '-'], deploymentYaml(`churn${i}`, WAVE));
        // the previous wave's pods go down while this one's come up
        if (i > 0) await k(e(), ['delete', 'deployment', `churn${i - 1}`, '--wait=false']);
        await sleep(step.delayMs);
        await inject(e(), step.fault, step.node);
        await runningApp(e(), `churn${i}`, WAVE, 420_000);
        created.push(Date.now() - t0);
      }
    } finally {
      await watch.stop();
    }
    const last = `churn${plan.length - 1}`;
    const running = await runningApp(e(), last, WAVE);
    // the earlier waves' pods terminated: the kubelet ends a pod only once its sandbox's network is torn down,
    // retrying a DEL that failed while coild was down
    const t1 = Date.now();
    let left: string[] = [];
    await eventually(
      'only the last wave left',
      async () => {
        const pods = (await kjson(e(), ['get', 'pods', '-l', 'app'])).items.filter((p) => !p.metadata.name.startsWith(`${last}-`));
        left = pods.map(
          (p) =>
            `${p.metadata.name} on ${p.spec?.nodeName ?? '-'} ${p.status?.phase ?? '-'}${p.metadata.deletionTimestamp ? ' terminating' : ''}`,
        );
        return pods.length === 0;
      },
      300_000,
    ).catch((err: Error) => {
      throw new Error(`${err.message}; seed ${seed}; pods left: ${left.join(', ')}`, { cause: err });
    });
    const settledMs = Date.now() - t1;
    // doctor on each node: what the faults left, reclaimed; then nothing but healthy attachments
    const found = e().lab.nodes.map((node) => ({ node: node.name, rows: unhealthy(node) }));
    const gc = e().lab.nodes.map((node) => doctorNode(node, ['--gc', '--apply']));
    const after = e().lab.nodes.map((node) => ({ node: node.name, rows: unhealthy(node) }));
    const cluster = doctorCluster();
    console.log(
      [
        `churn: ${plan.length * WAVE} pods in ${plan.length} waves of ${WAVE} on 2 nodes, seed ${seed} (CNIKIT_CHURN_SEED)`,
        `faults: ${plan.map((p) => `${p.fault}${p.fault === 'apiserver' ? '' : ` on ${p.node.name}`} after ${p.delayMs} ms`).join('; ')}`,
        `wave apply → all ${WAVE} Running: ${created.map((ms) => `${(ms / 1000).toFixed(1)} s`).join(', ')}; earlier waves gone ${(settledMs / 1000).toFixed(1)} s later`,
        `pod lists sampled: ${watch.samples}; duplicate pod IPs among Running pods: ${watch.duplicates.length}`,
        `doctor before GC: ${found.map((f) => `${f.node} ${f.rows.length} not healthy`).join(', ')}; GC steps: ${gc.map((g) => (g.out.steps as unknown[] | undefined)?.length ?? 0).join(', ')}`,
        `doctor after GC: ${after.map((f) => `${f.node} ${f.rows.length} not healthy`).join(', ')}`,
        `doctor cluster: ${JSON.stringify(cluster.out)}`,
      ].join('\n'),
    );
    expect(watch.duplicates).toEqual([]);
    expect(found).toEqual(e().lab.nodes.map((n) => ({ node: n.name, rows: [] })));
    expect(after).toEqual(e().lab.nodes.map((n) => ({ node: n.name, rows: [] })));
    expect(cluster).toMatchObject({ ok: true, out: { leakedBlocks: [], conflicts: [] } });
    // the last wave untouched by the GC: the same pods and addresses, talking across the nodes
    expect((await runningApp(e(), last, WAVE)).map((p) => `${p.name} ${p.ip}`).sort()).toEqual(
      running.map((p) => `${p.name} ${p.ip}`).sort(),
    );
    exchangeRoutes(e().lab.nodes);
    const [a, b] = [running.find((p) => p.node === 'kl-a'), running.find((p) => p.node === 'kl-b')];
    if (a && b) expect((await ping(e(), a, b.ip)).code).toBe(0);
    await deleteApp(e(), last);
    for (const node of e().lab.nodes) {
      await snapshots.backTo(node);
      expect(unhealthy(node)).toEqual([]);
    }
  }, 1_800_000);
});
