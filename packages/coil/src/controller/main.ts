/**
 * coil-ipam-controller: carves address blocks for BlockRequests, guards pool deletion, collects blocks of
 * deleted nodes. Runs under Lease leader election; health on :9387, metrics on :9386.
 */
import { hostname } from 'node:os';
import { Command } from 'commander';
import { HealthServer, KubeMetrics, connect, leaderElectionHealthy } from '@cnikit/kube';
import { Registry } from 'prom-client';
import { parseDuration, parseListenAddr } from '../util';
import { IpamController } from './ipam-controller';
import { LeaderRunner } from './leader';

async function main(): Promise<void> {
  const cmd = new Command('coil-ipam-controller')
    .option('--metrics-addr <addr>', 'bind address of the metrics endpoint', ':9386')
    .option('--health-addr <addr>', 'bind address of the health/readiness probes', ':9387')
    .option('--webhook-addr <addr>', 'accepted for compatibility: validation is CEL in the CRDs', ':9443')
    .option('--gc-interval <duration>', 'interval of the dangling AddressBlock GC', '1h')
    .option('--kubeconfig <path>', 'kubeconfig (default: in-cluster / $KUBECONFIG)')
    .option('--leader-election-namespace <ns>', 'namespace of the leader election Lease', process.env.POD_NAMESPACE ?? 'kube-system')
    .option('--leader-election-id <name>', 'name of the leader election Lease', 'coil-leader')
    .parse();
  const o = cmd.opts<{ metricsAddr: string; healthAddr: string; gcInterval: string; kubeconfig?: string; leaderElectionNamespace: string; leaderElectionId: string }>();
  const registry = new Registry();
  const kubeMetrics = new KubeMetrics({ registry, processMetrics: true });
  const transport = connect({ kubeconfig: o.kubeconfig, observer: kubeMetrics.observeRequests() });
  const ctl = new IpamController({ transport, registry, gcIntervalMs: parseDuration(o.gcInterval) });
  const runner = new LeaderRunner(ctl, {
    transport, namespace: o.leaderElectionNamespace, name: o.leaderElectionId, identity: `${hostname()}_${process.pid}`, metrics: kubeMetrics,
    onLost: () => {
      process.stderr.write('coil-ipam-controller: lost leadership\n');
      process.exit(1);
    },
    onStartFailed: (err) => {
      process.stderr.write(`coil-ipam-controller: start failed: ${(err as Error).message}\n`);
      process.exit(1);
    },
  });
  const m = parseListenAddr(o.metricsAddr);
  const h = parseListenAddr(o.healthAddr);
  const metricsServer = await new HealthServer({ host: m.host || '0.0.0.0', port: m.port, registry }).listen();
  const healthServer = await new HealthServer({ host: h.host || '0.0.0.0', port: h.port })
    .addHealthCheck('leader-election', leaderElectionHealthy(runner.elector))
    .addReadyCheck('informers', () => !runner.isLeader() || ctl.synced())
    .listen();
  const shutdown = async (): Promise<void> => {
    await runner.stop().catch(() => undefined);
    await Promise.all([metricsServer.close(), healthServer.close()]);
    process.exit(0);
  };
  process.once('SIGTERM', () => void shutdown());
  process.once('SIGINT', () => void shutdown());
  await runner.run();
}

main().catch((err: unknown) => {
  process.stderr.write(`coil-ipam-controller: ${(err as Error).stack ?? String(err)}\n`);
  process.exit(1);
});
