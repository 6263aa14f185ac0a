/**
 * Coil's egress NAT over Foo-over-UDP in a kernel that has ipip, ip6tnl and fou: one boot, the
 * datapath scenario (scenarios/coil-egress-datapath.ts: client pod, router pod, internet host
 * and a node with a kube-proxy-like DNAT, real TCP). The program checks everything with real
 * traffic and exits non-zero on the first failure; here we check its exit code and cross-check
 * what iproute2 / iptables / nft printed against the product's constants.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { guestKubeconfig, parseResults, REPO_ROOT, runInLab, summary, type LabResult } from '../lab';
// The cluster module alone (node built-ins only): @cnikit/kube's index pulls ESM-only packages this
// tier's jest config does not transform. The guest talks to the API server through its bundle.
import { startCluster, stopCluster, type ClusterInfo } from '@cnikit/kube-testing';

let res: LabResult;
let cluster: ClusterInfo | undefined;
let clusterError: unknown;

beforeAll(async () => {
  try {
    cluster = await startCluster({
      stateDir: fs.mkdtempSync(path.join(os.tmpdir(), 'klab-egress-cluster-')),
      buildScript: path.join(REPO_ROOT, 'tools/cluster/build.sh'),
      garbageCollector: false,
    });
  } catch (err) {
    clusterError = err;
  }
  res = await runInLab({
    timeoutMs: 570_000,
    hostNetwork: true,
    files: cluster ? { kubeconfig: guestKubeconfig(cluster.kubeconfig, cluster.server) } : {},
    scenarios: [
      { name: 'coil-egress-datapath', entry: 'e2e/kernel-lab/scenarios/coil-egress-datapath.ts', timeoutMs: 300_000 },
      // Bundled like a scenario so that the next one can run it; `--help` checks the CLI starts.
      { name: 'coil-egress-bin', entry: 'packages/coil/src/cmd/coil-egress.ts', args: ['--help'], timeoutMs: 60_000 },
      ...(cluster ? [{ name: 'coil-egress-daemon', entry: 'e2e/kernel-lab/scenarios/coil-egress-daemon.ts', timeoutMs: 180_000 }] : []),
    ],
  });
  process.stderr.write(`${summary(res)}\n`);
});

afterAll(async () => {
  if (cluster) await stopCluster(cluster);
});

function passed(name: string): Record<string, unknown> {
  const s = res.scenario(name);
  if (s.exitCode !== 0) throw new Error(`scenario ${name} exited ${s.exitCode}:\n${s.output}`);
  return parseResults(s.output);
}

describe('coil egress datapath', () => {
  test('client pod: rules 1800-2100, tables 117 (private) / 118 (public), FoU devices and ports as Coil', () => {
    const r = passed('coil-egress-datapath');
    const rules = r.clientRules as string;
    expect(rules).toMatch(/^1800:\s+from all to 169\.254\.0\.0\/16 lookup main/m);
    expect(rules).toMatch(/^1900:\s+from all lookup 117/m);
    expect(rules).toMatch(/^2000:\s+from all to 10\.0\.0\.0\/8 lookup main/m);
    expect(rules).toMatch(/^2001:\s+from all to 172\.16\.0\.0\/12 lookup main/m);
    expect(rules).toMatch(/^2002:\s+from all to 192\.168\.0\.0\/16 lookup main/m);
    expect(rules).toMatch(/^2100:\s+from all lookup 118/m);
    expect(rules).toMatch(/^1800:\s+from all to fe80::\/10 lookup main/m);
    expect(rules).toMatch(/^2000:\s+from all to fc00::\/7 lookup main/m);
    const routes = r.clientRoutes as string;
    expect(routes).toMatch(/^172\.20\.0\.0\/16 dev fou4_0a60000a proto 30/m);
    expect(routes).toMatch(/^203\.0\.113\.0\/24 dev fou4_0a60000a proto 30/m);
    expect(routes).toMatch(/^fd20::\/64 dev fou6_[0-9a-f]{8} proto 30/m);
    expect(routes).toMatch(/^2001:db8:1::\/64 dev fou6_[0-9a-f]{8} proto 30/m);
    const links = r.clientLinks as string;
    expect(links).toMatch(/ipip (any|ipip) remote 10\.96\.0\.10 local 10\.100\.0\.2 ttl 225 .*encap fou encap-sport 5555 encap-dport 5555/);
    expect(links).toMatch(/ip6tnl ip6ip6 remote fd00:96::10 local fd00:100::2 .*encap fou encap-sport 5555 encap-dport 5555/);
    // No link-local addresses on the tunnels: no ND / MLD chatter encapsulated to the peer.
    expect(links.match(/addrgenmode none/g)).toHaveLength(4);
    expect(links).toMatch(/coil_ipip4[@:][^\n]*\n[^\n]*\n\s+ipip external/);
    expect(links).toMatch(/coil_ipip6[@:][^\n]*\n[^\n]*\n\s+ip6tnl external/);
    expect(r.clientFou).toMatch(/^port 5555 ipproto 4$/m);
    expect(r.clientFou).toMatch(/^port 5555 ipproto 41 -6$/m);
    expect(r.read1).toEqual({
      fouPort: 5555,
      peers: [
        { peer: '10.96.0.10', sportAuto: false, destinations: ['172.20.0.0/16', '203.0.113.0/24'] },
        { peer: 'fd00:96::10', sportAuto: false, destinations: ['2001:db8:1::/64', 'fd20::/64'] },
      ],
    });
  });

  test('egress destinations go through the router (internet sees the router, v4 and v6), others do not', () => {
    const r = passed('coil-egress-datapath');
    expect((r.fixedRx as { fou4: number }).fou4).toBeGreaterThan(0);
    expect(r.read2).toEqual({
      fouPort: 5555,
      peers: [
        { peer: '10.96.0.10', sportAuto: false, destinations: ['172.20.0.0/16', '198.51.100.0/24'] },
        { peer: 'fd00:96::10', sportAuto: false, destinations: ['2001:db8:2::/64'] },
      ],
    });
  });

  test('fouSourcePortAuto switches the encap sport; replies then land on the catch-all receivers', () => {
    const r = passed('coil-egress-datapath');
    expect(r.autoLink).toMatch(/encap fou encap-sport auto encap-dport 5555/);
    expect(r.fixedLink).toMatch(/encap fou encap-sport 5555 encap-dport 5555/);
    const rx = r.autoRx as { coil_ipip4: number; coil_ipip6: number };
    expect(rx.coil_ipip4).toBeGreaterThan(0);
    expect(rx.coil_ipip6).toBeGreaterThan(0);
  });

  test('router SNAT: iptables and nftables both masquerade; none = the client address leaks through', () => {
    const r = passed('coil-egress-datapath');
    expect(r.routerIptables).toMatch(/-A POSTROUTING ! -s 10\.101\.0\.2\/32 -o eth0 -j MASQUERADE/);
    expect(r.routerIptables).toMatch(/-A POSTROUTING ! -s fd00:101::2\/128 -o eth0 -j MASQUERADE/);
    expect(r.nftTable).toMatch(/table inet coil-egress/);
    expect(r.nftTable).toMatch(/oifname "eth0" ip saddr != 10\.101\.0\.2 masquerade/);
    expect(r.nftTable).toMatch(/oifname "eth0" ip6 saddr != fd00:101::2 masquerade/);
    expect(r.backends).toEqual({ none: '10.100.0.2', nftables: '10.101.0.2', iptables: '10.101.0.2' });
  });

  test('router removes the tunnel of a client that went away; removeNatClient leaves nothing', () => {
    const r = passed('coil-egress-datapath');
    const gone = r.clientGone as { removed: string[]; rxDelta: number };
    expect(gone.removed).toEqual(['fou4_0a640002']);
    expect(gone.rxDelta).toBe(0);
    process.stderr.write(`coil egress timings (guest, TCG): ${JSON.stringify(r.timings)}\n`);
    expect(r.removed).not.toMatch(/fou[46]_|coil_ipip|lookup 11[78]/);
  });

  test('coil-egress (bundled CLI) against the real kube-apiserver: annotating a pod creates the tunnels, deleting it removes them', () => {
    if (!cluster) throw new Error(`the test API server did not start: ${String(clusterError)}`);
    const help = res.scenario('coil-egress-bin');
    expect(help.exitCode).toBe(0);
    expect(help.output).toMatch(/--fou-port <n>/);
    expect(help.output).toMatch(/--backend <name>/);
    const r = passed('coil-egress-daemon');
    process.stderr.write(`coil-egress daemon: ${JSON.stringify(r.daemon)}\n`);
    const d = r.daemon as { seen4: string; seen6: string; tunnelled: number; clientCount: number; conntrackLimit: number };
    expect(d.seen4).toBe('10.101.0.2');
    expect(d.seen6).toBe('fd00:101::2');
    expect(d.tunnelled).toBeGreaterThan(0);
    expect(d.clientCount).toBe(2);
    expect(d.conntrackLimit).toBeGreaterThan(0);
  });
});
