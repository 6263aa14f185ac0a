/**
 * Coil egress end to end in the kernel lab, one boot: the real kube-apiserver on the host (dual-stack service
 * range 10.96.0.0/24 + fd00:96::/112, so the Egress Service can have the ClusterIPs the topology's DNAT maps
 * to the router pod), the real `coil-egress` program in the router pod's netns, and coild's real EgressClient
 * with the real NAT client in the client pod's netns (scenarios/coil-egress-e2e.ts). The scenario checks
 * everything with real TCP and exits non-zero on the first failure; here we check its exit code, cross-check
 * its records and print the timings.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { guestKubeconfig, parseResults, REPO_ROOT, runInLab, summary, type LabResult } from '../lab';
// The cluster module alone (node built-ins only), as coil-egress.test.ts does.
import { startCluster, stopCluster, type ClusterInfo } from '@cnikit/kube-testing';

let res: LabResult;
let cluster: ClusterInfo;
let clusterMs = 0;

beforeAll(async () => {
  const t0 = Date.now();
  cluster = await startCluster({
    stateDir: fs.mkdtempSync(path.join(os.tmpdir(), 'klab-egress-e2e-cluster-')),
    buildScript: path.join(REPO_ROOT, 'tools/cluster/build.sh'),
    garbageCollector: false,
    // Overrides the default 10.0.0.0/24 (the last flag wins): dual-stack, and the topology's ClusterIPs.
    apiServerArgs: ['--service-cluster-ip-range=10.96.0.0/24,fd00:96::/112'],
  });
  clusterMs = Date.now() - t0;
  res = await runInLab({
    timeoutMs: 420_000,
    hostNetwork: true,
    files: { kubeconfig: guestKubeconfig(cluster.kubeconfig, cluster.server) },
    scenarios: [
      // Bundled like a scenario so that the e2e program can run it; `--help` checks the CLI starts.
      { name: 'coil-egress-bin', entry: 'packages/coil/src/cmd/coil-egress.ts', args: ['--help'], timeoutMs: 60_000 },
      { name: 'coil-egress-e2e', entry: 'e2e/kernel-lab/scenarios/coil-egress-e2e.ts', timeoutMs: 240_000 },
    ],
  });
  process.stderr.write(`${summary(res)}\n`);
});

afterAll(async () => {
  if (cluster) await stopCluster(cluster);
});

interface E2e {
  dualStack: boolean;
  seen: Record<string, string>;
  catchAllRx: number;
  routerTunnelsLeft: string[];
  autoLink: string;
  fixedLink: string;
  foundNetns: string;
  clientNetns: string;
  natCalls: { phase: string; op: string; netns: string; ms: number; dests?: string[]; sportAuto?: boolean }[];
  why: string[];
  timings: Record<string, number>;
}

function e2e(): E2e {
  const s = res.scenario('coil-egress-e2e');
  if (s.exitCode !== 0) throw new Error(`scenario coil-egress-e2e exited ${s.exitCode}:\n${s.output}`);
  return parseResults(s.output).e2e as E2e;
}

describe('coil egress end to end: coil-egress + coild EgressClient + real NAT client + kube-apiserver', () => {
  test('the scenario passed; timings', () => {
    expect(res.scenario('coil-egress-bin').exitCode).toBe(0);
    const r = e2e();
    process.stderr.write(
      `coil egress e2e: cluster start ${clusterMs} ms, boot ${res.bootMs} ms, scenario ${res.scenario('coil-egress-e2e').durationMs} ms, ` +
        `lab total ${res.totalMs} ms, dual-stack ${r.dualStack}\nsteps (guest ms): ${JSON.stringify(r.timings)}\n` +
        `NAT client calls: ${JSON.stringify(r.natCalls)}\nwhy: ${JSON.stringify(r.why)}\nnetns found after restart: ${r.foundNetns}\n`,
    );
    // The host test gives the API server an IPv6 service range: the Service is dual-stack.
    expect(r.dualStack).toBe(true);
  });

  test('ADD through EgressClient, then real TCP: Egress destinations seen from the router, others from the client', () => {
    const r = e2e();
    expect(r.natCalls.filter((c) => c.phase === 'add')).toEqual([
      expect.objectContaining({ op: 'reconcile', netns: r.clientNetns, dests: ['203.0.113.0/24', '2001:db8:1::/64'], sportAuto: false }),
    ]);
    expect(r.seen).toMatchObject({
      'step3 in 203.0.113.2': '10.101.0.2',
      'step3 in 2001:db8:1::2': 'fd00:101::2',
      'step3 out 198.51.100.2': '10.100.0.2',
      'step3 out 2001:db8:2::2': 'fd00:100::2',
    });
  });

  test('editing spec.destinations through the API is followed live by the running pod', () => {
    const r = e2e();
    expect(r.seen).toMatchObject({
      'step4 added 198.51.100.2': '10.101.0.2',
      'step4 added 2001:db8:2::2': 'fd00:101::2',
      'step4 removed 203.0.113.2': '10.100.0.2',
      'step4 removed 2001:db8:1::2': 'fd00:100::2',
      'step4 still 198.51.100.2': '10.101.0.2',
    });
    // Reconciled by EgressClient's watch, on the path ADD gave; nothing else ran in the meantime.
    const liveCalls = r.natCalls.filter((c) => c.phase === 'live-destinations');
    expect(liveCalls.every((c) => c.op === 'reconcile' && c.netns === r.clientNetns)).toBe(true);
    const live = liveCalls.map((c) => c.dests?.join());
    expect(live).toContain('203.0.113.0/24,2001:db8:1::/64,198.51.100.0/24,2001:db8:2::/64');
    expect(live).toContain('198.51.100.0/24,2001:db8:2::/64');
    expect(r.why).toContain('egress changed');
  });

  test("fouSourcePortAuto toggles the client tunnel's encap sport live", () => {
    const r = e2e();
    expect(r.autoLink).toMatch(/encap fou encap-sport auto encap-dport 5555/);
    expect(r.fixedLink).toMatch(/encap fou encap-sport 5555 encap-dport 5555/);
    expect(r.catchAllRx).toBeGreaterThan(0);
    expect(r.natCalls.filter((c) => c.phase === 'live-sport').map((c) => c.sportAuto)).toEqual(expect.arrayContaining([true, false]));
  });

  test('coild restart: the pod found by address, its netns from the host veth, an edit made meanwhile caught up', () => {
    const r = e2e();
    // The scenario checked the found path is the client's namespace (same nsfs inode).
    expect(r.foundNetns).toMatch(/^\/(var\/)?run\/netns\/klc-|^\/proc\/\d+\/ns\/net$/);
    expect(r.natCalls.filter((c) => c.phase === 'while-stopped')).toEqual([]);
    const restart = r.natCalls.filter((c) => c.phase === 'restart');
    expect(restart.length).toBeGreaterThanOrEqual(1);
    expect(restart.every((c) => c.netns === r.foundNetns)).toBe(true);
    expect(restart.at(-1)!.dests).toEqual(['203.0.113.0/24', '2001:db8:1::/64', '198.51.100.0/24', '2001:db8:2::/64']);
    expect(r.seen['restart in 203.0.113.2']).toBe('10.101.0.2');
  });

  test("deleting the Pod removes the router's tunnels", () => {
    const r = e2e();
    expect(r.routerTunnelsLeft).toEqual([]);
    expect(r.timings['6.podDeleted']).toBeGreaterThan(0);
  });
});
