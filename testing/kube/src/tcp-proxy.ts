/**
 * A loopback TCP proxy that tests put between a client and the API server to break the network on purpose:
 * dropAll() resets every open connection (a watch sees its stream die mid-way), block() refuses new
 * connections until unblock() (the API server looks unreachable). TLS passes through untouched, so the
 * client still verifies the server's certificate (issued for 127.0.0.1).
 */
import * as net from 'node:net';

export class TcpProxy {
  private server: net.Server | undefined;
  private readonly sockets = new Set<net.Socket>();
  private blocked = false;
  /** Connections accepted and forwarded so far. */
  connections = 0;

  constructor(private readonly target: { host: string; port: number }) {}

  static forUrl(url: string): TcpProxy {
    const u = new URL(url);
    return new TcpProxy({ host: u.hostname, port: Number(u.port) });
  }

  async listen(): Promise<this> {
    const server = net.createServer((client) => {
      if (this.blocked) {
        client.resetAndDestroy();
        return;
      }
      this.connections++;
      const upstream = net.connect(this.target.port, this.target.host);
      for (const s of [client, upstream]) {
        this.sockets.add(s);
        s.on('close', () => this.sockets.delete(s));
        s.on('error', () => undefined);
      }
      client.pipe(upstream);
      upstream.pipe(client);
      client.on('close', () => upstream.destroy());
      upstream.on('close', () => client.destroy());
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(0, '127.0.0.1', () => resolve());
    });
    this.server = server;
    return this;
  }

  get port(): number {
    return (this.server?.address() as net.AddressInfo).port;
  }

  /** The proxy's URL with the target URL's scheme: https://127.0.0.1:<port>. */
  urlFor(targetUrl: string): string {
    const u = new URL(targetUrl);
    return `${u.protocol}//127.0.0.1:${this.port}`;
  }

  /** Client connections currently open. */
  get openConnections(): number {
    return this.sockets.size / 2;
  }

  /** Resets every open connection (both directions); returns how many client connections were open. */
  dropAll(): number {
    const n = this.openConnections;
    for (const s of this.sockets) s.resetAndDestroy();
    return n;
  }

  /** Refuses new connections (reset on accept) and drops open ones. */
  block(): void {
    this.blocked = true;
    this.dropAll();
  }

  unblock(): void {
    this.blocked = false;
  }

  async close(): Promise<void> {
    this.dropAll();
    const s = this.server;
    this.server = undefined;
    if (s) await new Promise<void>((resolve) => s.close(() => resolve()));
  }
}
