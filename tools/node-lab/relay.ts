// API server relay of one lab node: `node relay.cjs <netns path> <port>`.
//
// The test API server listens on 127.0.0.1:<port> in the host's network namespace only; a node's kubelet and
// daemons (own netns) must reach it at the very same URL so that the server certificate (SAN IP:127.0.0.1) and
// the kubeconfigs stay unchanged. The listening socket is created while the thread is inside the node's netns
// (a socket stays in the namespace it was created in), every accepted connection is then forwarded to
// 127.0.0.1:<port> dialled from the host namespace, where the thread runs again.
//
// Bundled by lab.ts with esbuild (it imports netlib, which Node's type stripping alone cannot load).
import * as net from 'node:net';
import { openNetns, runInNetns } from '@cnikit/netlib';

const LOOPBACK = new Set(['127.0.0.1', '::ffff:127.0.0.1', '::1']);
/** The kubernetes Service (ClusterIP 10.0.0.1, port 443): what kube-proxy would send to the API server. */
const SERVICE_IP = '10.0.0.1';
const SERVICE_ADDRS = new Set([SERVICE_IP, `::ffff:${SERVICE_IP}`]);

function pipe(client: net.Socket, port: number): void {
  const upstream = net.connect({ host: '127.0.0.1', port });
  // Half-close both ways: TLS close_notify and HTTP/2 GOAWAY must reach the other side before the FIN.
  client.pipe(upstream);
  upstream.pipe(client);
  const drop = (): void => {
    client.destroy();
    upstream.destroy();
  };
  client.on('error', drop);
  upstream.on('error', drop);
  client.on('close', () => upstream.end());
  upstream.on('close', () => client.end());
}

/**
 * A listener in the node's netns forwarding to the API server. listen() creates and binds the socket synchronously
 * only without a host (with one it resolves it first, on a later tick, when the thread is back home): so it binds
 * the wildcard address, and connections that did not arrive at one of `accept` are refused.
 */
function listenInNode(ns: ReturnType<typeof openNetns>, listenPort: number, accept: Set<string>, apiPort: number, what: string): void {
  const server = runInNetns(ns, () =>
    net
      .createServer((c) => {
        if (accept.has(c.localAddress ?? '')) pipe(c, apiPort);
        else c.destroy();
      })
      .listen({ port: listenPort, backlog: 128 }),
  );
  server.on('listening', () => console.log(`relay: ${what} on port ${listenPort}`));
  server.on('error', (err) => {
    console.error(`relay: ${what}: ${err.message}`);
    process.exit(1);
  });
}

function main(): void {
  const [nsPath, portArg] = process.argv.slice(2);
  const port = Number(portArg);
  if (!nsPath || !Number.isInteger(port) || port <= 0) {
    console.error('usage: relay <netns path> <port>');
    process.exit(2);
  }
  const ns = openNetns(nsPath);
  listenInNode(ns, port, LOOPBACK, port, `127.0.0.1:${port} in ${nsPath}`);
  // Pods with in-cluster config (KUBERNETES_SERVICE_HOST) dial the Service; lab.ts puts its address on the node's lo.
  listenInNode(ns, 443, SERVICE_ADDRS, port, `the kubernetes Service ${SERVICE_IP}:443 in ${nsPath}`);
  ns.close();
  process.on('SIGTERM', () => process.exit(0));
}

main();
