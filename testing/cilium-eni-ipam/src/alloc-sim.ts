/**
 * The allocation benchmark's simulation: N instances in moto behind the fault proxy (fixed latency per
 * call), one NodeSyncer with the operator's token bucket, W parallel workers taking nodes biggest-deficit
 * first, each node with P pending pods. Measures the time until every node can start its pods (pool >= P)
 * and until the watermark holds (pool >= P + pre-allocate), the EC2 calls made, and the lower bound the
 * rate limit allows for the calls that are strictly needed.
 */
import {
  LimitsTable,
  NodeSyncer,
  SdkEc2,
  TokenBucket,
  calculateNeededIPs,
  ipamParams,
  newMemory,
  type CiliumNode,
  type InstanceLimits,
  type NodeMemory,
} from '@cnikit/cilium-eni-ipam';
import { makeWorld, runInstances } from './ec2-fixture';
import { startFaultProxy } from './fault-proxy';
import { startMoto } from './moto';

export interface SimOptions {
  nodes: number;
  pendingPods: number;
  qps: number;
  burst: number;
  latencyMs: number;
  workers: number;
  instanceType: string;
  preAllocate?: number;
  log?: (m: string) => void;
}

export interface SimResult {
  nodes: number;
  podsReadyMs: number;
  watermarkMs: number;
  ec2Calls: number;
  callsByAction: Record<string, number>;
  minCalls: number;
  lowerBoundMs: number;
  syncs: number;
  p50NodeReadyMs: number;
  p90NodeReadyMs: number;
  throttleWaitMs: number;
  setupMs: number;
}

/** EC2 calls a node strictly needs to get `want` IPs on this instance type: 1 describe, 1 assign on eth0, 3 per new ENI. */
export function minCallsPerNode(l: InstanceLimits, want: number): number {
  const per = l.ipv4 - 1;
  const newEnis = Math.max(0, Math.ceil((want - per) / per));
  return 1 + (want > 0 ? 1 : 0) + 3 * newEnis;
}

/** Time the token bucket needs for `calls` calls: the burst at once, the rest at qps. */
export function rateLimitLowerBoundMs(calls: number, qps: number, burst: number): number {
  return (Math.max(0, calls - burst) / qps) * 1000;
}

export async function runAllocationSim(o: SimOptions): Promise<SimResult> {
  const log = o.log ?? (() => undefined);
  const t0 = performance.now();
  const moto = await startMoto();
  const proxy = await startFaultProxy(moto.endpoint);
  try {
    const w = await makeWorld(moto.endpoint);
    const ids = await runInstances(w, o.nodes, o.instanceType);
    const pre = o.preAllocate ?? 8;
    const nodes: CiliumNode[] = ids.map((id, k) => ({
      metadata: { name: `node-${k}` },
      spec: {
        'instance-id': id,
        eni: { 'instance-type': o.instanceType, 'vpc-id': w.vpcId, 'availability-zone': w.az, 'subnet-tags': { pods: 'a' } },
        ipam: { 'pre-allocate': pre },
      },
    }));
    proxy.rules.push({ action: '*', latencyMs: o.latencyMs });
    proxy.reset();
    const setupMs = performance.now() - t0;
    log(`setup: ${o.nodes} instances in moto in ${(setupMs / 1000).toFixed(1)} s`);

    const limits = new LimitsTable();
    const ec2 = new SdkEc2({ endpoint: proxy.endpoint, limiter: new TokenBucket(o.qps, o.burst) });
    const syncer = new NodeSyncer(ec2, { clusterName: 'bench', limits, maxActions: 8 });
    const mem = new Map<string, NodeMemory>(nodes.map((n) => [n.metadata.name!, newMemory()]));
    const poolSize = (n: CiliumNode) => Object.keys(n.spec.ipam?.pool ?? {}).length;
    const deficit = (n: CiliumNode) => {
      const p = ipamParams(n);
      return calculateNeededIPs(poolSize(n), o.pendingPods, p.preAllocate, p.minAllocate, p.maxAllocate);
    };
    const readyAt = new Map<string, number>();
    const start = performance.now();
    let podsReadyMs = 0;
    let syncs = 0;
    const queue = [...nodes];
    const worker = async (): Promise<void> => {
      for (;;) {
        queue.sort((a, b) => deficit(b) - deficit(a));
        const n = queue.shift();
        if (!n) return;
        const r = await syncer.sync(n, mem.get(n.metadata.name!)!, Math.max(0, o.pendingPods - 0));
        syncs++;
        n.spec.ipam = { ...n.spec.ipam, pool: r.pool };
        n.status = { eni: { enis: r.enis }, ipam: { 'release-ips': r.releaseIps, 'operator-status': r.error ? { error: r.error } : {} } };
        const size = poolSize(n);
        if (size >= o.pendingPods && !readyAt.has(n.metadata.name!)) readyAt.set(n.metadata.name!, performance.now() - start);
        if (size < o.pendingPods + pre) {
          if (r.error && /capacity/.test(r.error)) throw new Error(`node ${n.metadata.name} at capacity before the watermark: ${r.error}`);
          queue.push(n);
        }
        if (readyAt.size === nodes.length && !podsReadyMs) podsReadyMs = performance.now() - start;
      }
    };
    await Promise.all(Array.from({ length: o.workers }, worker));
    const watermarkMs = performance.now() - start;
    const times = [...readyAt.values()].sort((a, b) => a - b);
    const minCalls = o.nodes * minCallsPerNode(limits.get(o.instanceType)!, o.pendingPods + pre) + 2; // + DescribeSubnets/DescribeVpcs once
    return {
      nodes: o.nodes,
      podsReadyMs,
      watermarkMs,
      ec2Calls: ec2.stats.attempts,
      callsByAction: { ...proxy.calls },
      minCalls,
      lowerBoundMs: rateLimitLowerBoundMs(minCalls, o.qps, o.burst),
      syncs,
      p50NodeReadyMs: times[Math.floor(times.length * 0.5)] ?? 0,
      p90NodeReadyMs: times[Math.floor(times.length * 0.9)] ?? 0,
      throttleWaitMs: ec2.limiter.waitedMs,
      setupMs,
    };
  } finally {
    await proxy.close();
    await moto.stop();
  }
}
