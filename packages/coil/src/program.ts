/**
 * What every Coil program does around its own work, written once: the flags they all take, the API
 * connection with its metrics, the metrics and probe endpoints, start-up retried while the API server is not
 * ready, shutdown on SIGTERM/SIGINT, and exit 1 with the stack on a fatal error.
 */
import { Command } from 'commander';
import { HealthServer, KubeMetrics, connect, parseListenAddr, type KubeTransport } from '@cnikit/kube';
import { retry, type Backoff } from '@cnikit/netlib/retry';
import { Registry } from '@cnikit/kube/prom';

/** Runs `main`; a failure is printed with the program's name and exits 1. */
export function programMain(program: string, main: () => Promise<void>): void {
  main().catch((err: unknown) => {
    process.stderr.write(`${program}: ${(err as Error).stack ?? String(err)}\n`);
    process.exit(1);
  });
}

/** The command line of `program` with the flags every Coil program has: metrics and probe addresses, kubeconfig. */
export function programCommand(program: string, ports: { metrics: number; health: number }): Command {
  return new Command(program)
    .option('--metrics-addr <addr>', 'bind address of the metrics endpoint', `:${ports.metrics}`)
    .option('--health-addr <addr>', 'bind address of the health/readiness probes', `:${ports.health}`)
    .option('--kubeconfig <path>', 'kubeconfig (default: in-cluster / $KUBECONFIG)');
}

export interface Connection {
  /** Process metrics, the kit's, and whatever the program adds. */
  registry: Registry;
  kubeMetrics: KubeMetrics;
  transport: KubeTransport;
}

/** The API connection (kubeconfig, else in-cluster / $KUBECONFIG), its requests counted in a new registry. */
export function connectWithMetrics(kubeconfig: string | undefined): Connection {
  const registry = new Registry();
  const kubeMetrics = new KubeMetrics({ registry, processMetrics: true });
  return { registry, kubeMetrics, transport: connect({ kubeconfig, observer: kubeMetrics.observeRequests() }) };
}

/** The metrics endpoint (`registry`) and the probes (`checks` adds the program's) on their addresses; "" host = all. */
export async function serveEndpoints(
  o: { metricsAddr: string; healthAddr: string; registry: Registry },
  checks: (probes: HealthServer) => HealthServer,
): Promise<HealthServer[]> {
  const m = parseListenAddr(o.metricsAddr, '--metrics-addr');
  const h = parseListenAddr(o.healthAddr, '--health-addr');
  const metrics = await new HealthServer({ host: m.host || '0.0.0.0', port: m.port, registry: o.registry }).listen();
  const probes = await checks(new HealthServer({ host: h.host || '0.0.0.0', port: h.port })).listen();
  return [metrics, probes];
}

/** On SIGTERM or SIGINT: `stop` (its failure ignored: the process leaves anyway), the endpoints closed, exit 0. */
export function shutdownOnSignal(stop: () => Promise<void>, endpoints: HealthServer[]): void {
  const shutdown = async (): Promise<void> => {
    await stop().catch(() => undefined);
    await Promise.all(endpoints.map((s) => s.close()));
    process.exit(0);
  };
  process.once('SIGTERM', () => void shutdown());
  process.once('SIGINT', () => void shutdown());
}

/** 60 attempts, 0.5 s doubling to 5 s apart: about 4.5 minutes for the API server to come up. */
const START_BACKOFF: Backoff = { steps: 60, initialMs: 500, factor: 2, jitter: 0, capMs: 5000 };

/**
 * Start-up that reads from the API server, retried while it is not ready yet (429 while its storage
 * initialises, connection refused) instead of dying on the first answer. `retrying` reports a failure and
 * undoes what the attempt left.
 */
export function startWithRetries(start: () => Promise<void>, retrying: (attempt: number, err: Error) => Promise<void>): Promise<void> {
  return retry({ backoff: START_BACKOFF, retriable: () => true }, async (attempt) => {
    try {
      return await start();
    } catch (err) {
      if (attempt < START_BACKOFF.steps) await retrying(attempt, err as Error);
      throw err;
    }
  });
}
