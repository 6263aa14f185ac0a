/**
 * Which source address a peer sees: one TCP exchange with busybox `nc`. The server (in a test
 * namespace) accepts one connection and answers with the remote address of that connection as its
 * own kernel reports it (`netstat -tn`); the client (a namespace or a container) prints it. Used by
 * the router tests to prove that north-south traffic leaves through the macvlan NIC with its own
 * address, and east-west traffic through the overlay NIC with the overlay address.
 */
import { run, sleep } from './exec';
import { Netns } from './netns';
import { busyboxPath } from './paths';
import { NetworkEndpoint, nsEndpoint } from './traffic';

let nextPort = 17_000 + (process.pid % 1000) * 10;

/** Strips the port and an IPv4-mapped prefix: "::ffff:172.16.50.101:40312" -> "172.16.50.101". */
export function addressOfEndpoint(endpoint: string): string {
  const host = endpoint.slice(0, endpoint.lastIndexOf(':'));
  return host.replace(/^::ffff:(\d+\.\d+\.\d+\.\d+)$/, '$1').replace(/^\[(.*)\]$/, '$1');
}

/**
 * Connects from `client` to `serverIP` (an address of `server`) and returns the client address the
 * server saw. Throws with both sides' output when the exchange fails.
 */
export async function sourceSeenBy(
  server: Netns,
  serverIP: string,
  client: Netns | NetworkEndpoint,
  opts: { timeoutMs?: number } = {},
): Promise<string> {
  const port = nextPort++;
  const bb = busyboxPath();
  const answer = `${bb} netstat -tn | ${bb} awk '$4 ~ /:${port}$/ && $6 != "LISTEN" {print $5; exit}'`;
  const serving = run(['ip', 'netns', 'exec', server.name, bb, 'nc', '-l', '-p', String(port), '-e', bb, 'sh', '-c', answer], {
    timeoutMs: opts.timeoutMs ?? 20_000,
  });
  const deadline = Date.now() + 5_000;
  for (;;) {
    const l = await run(['ip', 'netns', 'exec', server.name, bb, 'netstat', '-ltn']);
    if (l.stdout.includes(`:${port} `)) break;
    if (Date.now() > deadline) throw new Error(`nc server in ${server.name} did not listen on ${port}:\n${l.stdout}`);
    await sleep(50);
  }
  const who = client instanceof Netns ? nsEndpoint(client) : client;
  const r = await who.execIn(['nc', '-w', '5', serverIP, String(port)], { timeoutMs: opts.timeoutMs ?? 20_000 });
  const s = await serving;
  const line = r.stdout
    .split('\n')
    .map((x) => x.trim())
    .filter(Boolean)
    .pop();
  if (r.code !== 0 || line === undefined) {
    throw new Error(
      `TCP exchange ${who.label} -> ${serverIP}:${port} failed (client exit ${r.code}):\n${r.stdout}${r.stderr}\nserver: exit ${s.code}\n${s.stdout}${s.stderr}`,
    );
  }
  return addressOfEndpoint(line);
}
