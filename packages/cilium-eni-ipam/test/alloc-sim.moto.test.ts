// The benchmark's simulation at a small scale, with a fast rate limit: it must converge with exactly the
// strictly needed EC2 calls or close to it (the full-size run is tools/bench/cilium-eni.mjs).
import { LimitsTable } from '../src/limits';
import { minCallsPerNode, rateLimitLowerBoundMs, runAllocationSim } from '@cnikit/cilium-eni-ipam-testing';

test('lower-bound arithmetic', () => {
  const l = new LimitsTable().get('m5.2xlarge')!; // 4 ENIs x 14 secondary IPs
  expect(minCallsPerNode(l, 38)).toBe(1 + 1 + 3 * 2);
  expect(minCallsPerNode(l, 8)).toBe(2);
  expect(rateLimitLowerBoundMs(820, 4, 20)).toBe(200_000);
  expect(rateLimitLowerBoundMs(10, 4, 20)).toBe(0);
});

test('5 nodes x 30 pending pods converge; EC2 calls within 1.5x of the strict minimum', async () => {
  const r = await runAllocationSim({
    nodes: 5,
    pendingPods: 30,
    qps: 200,
    burst: 20,
    latencyMs: 5,
    workers: 5,
    instanceType: 'm5.2xlarge',
  });
  expect(r.podsReadyMs).toBeGreaterThan(0);
  expect(r.ec2Calls).toBeGreaterThanOrEqual(r.minCalls - 2);
  expect(r.ec2Calls).toBeLessThanOrEqual(Math.ceil(r.minCalls * 1.5));
}, 120_000);
