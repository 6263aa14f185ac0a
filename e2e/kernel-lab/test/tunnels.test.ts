/**
 * netlib's tunnel/ and fou/ primitives against a kernel that has the drivers: one boot, three
 * scenario programs (e2e/kernel-lab/scenarios/*.ts, bundled with esbuild and run by the pinned
 * Node in the guest). Each program makes its own checks with real traffic and exits non-zero
 * on the first failure; here we check the exit codes and cross-check what iproute2 printed.
 */
import { parseResults, runInLab, summary, type LabResult } from '../lab';

let res: LabResult;

beforeAll(async () => {
  res = await runInLab({
    timeoutMs: 480_000,
    scenarios: [
      { name: 'ipvlan', entry: 'e2e/kernel-lab/scenarios/ipvlan.ts', timeoutMs: 150_000 },
      { name: 'fou-ipip', entry: 'e2e/kernel-lab/scenarios/fou-ipip.ts', timeoutMs: 150_000 },
      { name: 'dummy-ip6tnl', entry: 'e2e/kernel-lab/scenarios/dummy-ip6tnl.ts', timeoutMs: 150_000 },
    ],
  });
  process.stderr.write(`${summary(res)}\n`);
});

/** The scenario's records, after asserting it passed (its output is the failure message otherwise). */
function passed(name: string): Record<string, unknown> {
  const s = res.scenario(name);
  if (s.exitCode !== 0) throw new Error(`scenario ${name} exited ${s.exitCode}:\n${s.output}`);
  return parseResults(s.output);
}

test('ipvlan L2: pod-to-pod and node-to-pod TCP through slaves of one master; modes l2/l3/l3s', () => {
  const r = passed('ipvlan');
  expect(r.podToPod).toEqual({ peer: '10.0.1.11', got: 'pod-to-pod' });
  expect(r.nodeToPod).toEqual({ peer: '10.0.1.1', got: 'node-to-pod' });
  expect(r.ipDetails).toMatch(/ipvlan\s+mode l2 bridge/);
  expect(r.ipDetailsL3s).toMatch(/ipvlan\s+mode l3s vepa/);
});

test('ipip over FoU (encap-sport auto): TCP through the tunnel, refused once the FoU port is closed', () => {
  const r = passed('fou-ipip');
  const ex = r.exchange as { peer: string; got: string; udpDelta: number };
  expect(ex.peer).toBe('10.10.0.1');
  expect(ex.udpDelta).toBeGreaterThan(0);
  expect(r.ipDetails).toMatch(
    /ipip (any|ipip) remote 192\.168\.100\.2 local 192\.168\.100\.1 .*encap fou encap-sport auto encap-dport 5555/,
  );
  expect(r.fouShow).toMatch(/^port 5555 ipproto 4$/m);
  expect(r.ipDetailsFixed).toMatch(/encap fou encap-sport 5555 encap-dport 5555/);
  expect(r.ipDetailsExternal).toMatch(/ipip external/);
  expect(r.delAgain).toMatch(/ENOENT/);
});

test('dummy links (also created straight into another netns); ip6tnl over FoU6 carrying TCP', () => {
  const r = passed('dummy-ip6tnl');
  expect(r.dummy).toMatch(/dummy1: .*\n.*\n\s+dummy /);
  expect((r.exchange6 as { peer: string }).peer).toBe('fd00:10::1');
  expect(r.ipDetails6).toMatch(/ip6tnl ip6ip6 remote fd00:100::2 local fd00:100::1 .*encap fou encap-sport auto encap-dport 5556/);
  expect(r.fouShow6).toMatch(/port 5556 ipproto 41/);
});
