/**
 * coild: the node daemon. IPAM from the node's address blocks, pod network setup, route export to
 * table 119; gRPC for the `coil` CNI binary on /run/coild.sock; metrics on :9384, health on :9385.
 */
import '../coild/tune';
import { hostNetns, openNetns } from '@cnikit/netlib';
import { connectWithMetrics, programCommand, programMain, serveEndpoints, shutdownOnSignal, startWithRetries } from '../program';
import { parseDuration } from '../util';
import { Coild } from '../coild/coild';
import { CoildServer } from '../coild/server';

async function main(): Promise<void> {
  const int = (v: string): number => {
    const n = Number(v);
    if (!Number.isInteger(n) || n < 0) throw new Error(`not a non-negative integer: ${v}`);
    return n;
  };
  const o = programCommand('coild', { metrics: 9384, health: 9385 })
    .option('--socket <path>', 'UNIX domain socket path', '/run/coild.sock')
    .option('--pod-table-id <n>', 'routing table for pod routes', int, 116)
    .option('--pod-rule-prio <n>', 'priority of the ip rule to the pod table', int, 2000)
    .option('--export-table-id <n>', 'routing table to export address blocks to', int, 119)
    .option('--protocol-id <n>', 'route protocol number of Coil routes', int, 30)
    .option('--compat-calico', 'name host veths like Calico (veth + sha1(namespace.pod))', false)
    .option('--enable-ipam', 'enable IPAM and pod networking', true)
    .option('--enable-egress', 'egress NAT client side: FoU tunnels in pods annotated egress.coil.cybozu.com/<ns>', false)
    .option('--egress-port <n>', 'FoU port of egress NAT', int, 5555)
    .option('--backend <name>', 'NAT backend: iptables | nftables', 'iptables')
    .option('--addressblock-gc-interval <duration>', 'interval of the unused address block GC', '5m')
    .option('--netns <path>', "do the node-side network work in this namespace instead of coild's own (tests)")
    .option('--node-name <name>', 'node name (default $COIL_NODE_NAME)')
    .parse()
    .opts<{
      metricsAddr: string;
      healthAddr: string;
      socket: string;
      podTableId: number;
      podRulePrio: number;
      exportTableId: number;
      protocolId: number;
      compatCalico: boolean;
      enableEgress: boolean;
      egressPort: number;
      addressblockGcInterval: string;
      kubeconfig?: string;
      netns?: string;
      nodeName?: string;
    }>();
  const nodeName = o.nodeName ?? process.env.COIL_NODE_NAME;
  if (!nodeName) throw new Error('COIL_NODE_NAME (or --node-name) is required');
  if (o.enableEgress && (o.egressPort < 1 || o.egressPort > 65535)) throw new Error(`--egress-port: not a port number: ${o.egressPort}`);
  const { registry, transport } = connectWithMetrics(o.kubeconfig);
  const coild = new Coild({
    transport,
    nodeName,
    hostNs: o.netns ? openNetns(o.netns) : hostNetns(),
    podTableId: o.podTableId,
    podRulePrio: o.podRulePrio,
    exportTableId: o.exportTableId,
    protocolId: o.protocolId,
    compatCalico: o.compatCalico,
    gcIntervalMs: parseDuration(o.addressblockGcInterval),
    egress: o.enableEgress ? { fouPort: o.egressPort } : undefined,
    registry,
  });
  // Start-up talks to the API server (blocks, nodes, namespaces).
  await startWithRetries(
    () => coild.start(),
    async (attempt, err) => {
      process.stderr.write(`coild: start-up failed (attempt ${attempt}), retrying: ${err.message}\n`);
      await coild.stop().catch(() => undefined);
    },
  );
  const server = new CoildServer(coild, { socketPath: o.socket, registry });
  await server.listen();
  const endpoints = await serveEndpoints({ ...o, registry }, (probes) => probes.addReadyCheck('coild', () => coild.isReady()));
  process.stderr.write(`coild: node ${nodeName} serving on ${o.socket}\n`);
  shutdownOnSignal(async () => {
    await server.close().catch(() => undefined);
    await coild.stop();
  }, endpoints);
}

programMain('coild', main);
