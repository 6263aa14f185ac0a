/**
 * The node agent: creates its CiliumNode with the instance's data, follows it, waits for the minimum pool,
 * serves the IPAM plugin over a UNIX socket (one JSON line per request), answers the release handshake and
 * publishes status.ipam.used (coalesced). Why a socket and not the plugin reading the CiliumNode itself: the
 * plugin stays a tiny short-lived process (no Kubernetes client, no TLS, no watch), and every allocation on
 * the node is serialized in one process, so two pods never race for an IP and the API server sees one
 * writer per node for `used` instead of one read-modify-write per pod.
 */
import * as fs from 'node:fs';
import * as net from 'node:net';
import { Informer, clientFor, isNotFound, traceLogger, type KubeTransport, type Logger, type ResourceClient } from '@cnikit/kube';
import type { AgentReply, AgentRequest } from './agent-client';
import { PoolAllocator, PoolExhausted } from './pool';
import { CiliumNodes, type CiliumNode, type EniSpec, type IpamSpec } from './types';

export { DEFAULT_SOCKET } from './agent-client';
import { DEFAULT_SOCKET } from './agent-client';

/** Ops about the whole node, not one attachment: they need no "owner". */
const OWNERLESS = new Set<AgentRequest['op']>(['status', 'gc', 'leases']);

export interface InstanceData {
  instanceId: string;
  instanceType: string;
  vpcId: string;
  availabilityZone: string;
  nodeSubnetId?: string;
}

export interface AgentOptions {
  transport: KubeTransport;
  nodeName: string;
  instance: InstanceData;
  ipam?: Omit<IpamSpec, 'pool'>;
  eni?: EniSpec;
  socketPath?: string;
  /** Coalescing delay for status.ipam.used. Default 50 ms. */
  publishDelayMs?: number;
  logger?: Logger;
}

export class Agent {
  readonly nodes: ResourceClient<CiliumNode>;
  readonly informer: Informer<CiliumNode>;
  readonly pool = new PoolAllocator();
  private server: net.Server | undefined;
  private publishTimer: NodeJS.Timeout | undefined;
  private publishing: Promise<void> = Promise.resolve();
  private readonly log: Logger;
  private poolWaiters: (() => void)[] = [];
  /** The operator's last error for this node (status.ipam.operator-status.error): why the pool may not grow. */
  private operatorError: string | undefined;
  /** Status writes made (tests, bench). */
  writes = 0;

  constructor(private readonly opts: AgentOptions) {
    this.nodes = clientFor(opts.transport, CiliumNodes);
    this.informer = new Informer(this.nodes, { fieldSelector: `metadata.name=${opts.nodeName}` });
    this.log = opts.logger ?? traceLogger('cilium-eni.agent', { node: opts.nodeName });
    const onNode = (n: CiliumNode): void => {
      this.pool.setNode(n);
      this.operatorError = n.status?.ipam?.['operator-status']?.error || undefined;
      const answer = this.pool.answerHandshake();
      if (answer) this.schedulePublish(0);
      if (this.poolReady()) for (const w of this.poolWaiters.splice(0)) w();
    };
    this.informer.addHandlers({ add: onNode, update: (_o, n) => onNode(n) });
  }

  get socketPath(): string {
    return this.opts.socketPath ?? DEFAULT_SOCKET;
  }

  /** Creates or updates the CiliumNode with this instance's data; restores used IPs after a restart. */
  async ensureNode(): Promise<CiliumNode> {
    const { instance: i } = this.opts;
    const eni: EniSpec = {
      'instance-type': i.instanceType,
      'vpc-id': i.vpcId,
      'availability-zone': i.availabilityZone,
      'node-subnet-id': i.nodeSubnetId,
      ...(this.opts.eni ?? {}),
    };
    let node = await this.nodes.find(this.opts.nodeName);
    if (!node) {
      try {
        node = await this.nodes.create({
          metadata: { name: this.opts.nodeName },
          spec: { 'instance-id': i.instanceId, eni, ipam: { ...(this.opts.ipam ?? {}) } },
        });
      } catch (e) {
        node = await this.nodes.get(this.opts.nodeName).catch(() => {
          throw e;
        });
      }
    } else {
      node = await this.nodes.updateWithRetry(this.opts.nodeName, (cur) => {
        if (cur.spec['instance-id'] === i.instanceId && JSON.stringify(cur.spec.eni) === JSON.stringify({ ...cur.spec.eni, ...eni }))
          return false;
        cur.spec['instance-id'] = i.instanceId;
        cur.spec.eni = { ...(cur.spec.eni ?? {}), ...eni };
        if (this.opts.ipam) cur.spec.ipam = { ...(cur.spec.ipam ?? {}), ...this.opts.ipam };
        return cur;
      });
    }
    this.pool.restore(node.status?.ipam?.used ?? {});
    this.pool.setNode(node);
    return node;
  }

  private poolReady(): boolean {
    const min = Math.max(1, this.opts.ipam?.['min-allocate'] ?? 0);
    return this.pool.poolSize >= min;
  }

  /** Resolves once spec.ipam.pool holds at least max(min-allocate, 1) IPs. */
  waitForPool(timeoutMs = 60_000): Promise<void> {
    if (this.poolReady()) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const t = setTimeout(
        () => reject(new Error(`agent: pool of ${this.opts.nodeName} not ready after ${timeoutMs} ms (${this.pool.poolSize} IPs)`)),
        timeoutMs,
      );
      this.poolWaiters.push(() => {
        clearTimeout(t);
        resolve();
      });
    });
  }

  async start(): Promise<void> {
    await this.ensureNode();
    await this.informer.start();
    await this.listen();
  }

  async stop(): Promise<void> {
    await new Promise<void>((r) => (this.server ? this.server.close(() => r()) : r()));
    this.server = undefined;
    await this.flush();
    await this.informer.stop();
  }

  /** Publishes now and waits for it. */
  async flush(): Promise<void> {
    if (this.publishTimer) {
      clearTimeout(this.publishTimer);
      this.publishTimer = undefined;
      this.publishing = this.publishing.then(() => this.publish());
    }
    await this.publishing;
  }

  handle(req: AgentRequest): AgentReply {
    if (!req || (!OWNERLESS.has(req.op) && (typeof req.owner !== 'string' || !req.owner)))
      return { ok: false, code: 7, msg: 'agent: request needs a non-empty "owner"' };
    try {
      if (req.op === 'add') {
        const lease = this.pool.allocate(req.owner);
        this.schedulePublish();
        return { ok: true, lease };
      }
      if (req.op === 'del') {
        const released = this.pool.release(req.owner);
        if (released.length) this.schedulePublish();
        return { ok: true, released };
      }
      if (req.op === 'check') return { ok: true, lease: this.pool.holding(req.owner) };
      if (req.op === 'gc') {
        if (!Array.isArray(req.keep) || !req.keep.every((k) => typeof k === 'string'))
          return { ok: false, code: 7, msg: 'agent: gc needs "keep", an array of owners' };
        const released = this.pool.releaseExcept(new Set(req.keep));
        if (released.length) {
          this.log.info('gc released IPs of gone attachments', { released });
          this.schedulePublish();
        }
        return { ok: true, released };
      }
      if (req.op === 'leases') return { ok: true, leases: this.pool.usedIps() };
      if (req.op === 'status') {
        const why = this.operatorError ? { operatorError: this.operatorError } : {};
        return { ok: true, pool: this.pool.poolSize, used: this.pool.used.size, free: this.pool.freeIps().length, ...why };
      }
      return { ok: false, code: 4, msg: `agent: unknown op ${JSON.stringify((req as { op: unknown }).op)}` };
    } catch (e) {
      // Pool empty is transient (the operator is on it): CNI code 11, try again later.
      // The operator's error says why the pool does not grow (EC2 throttling, an outage): the pod's event names it.
      if (e instanceof PoolExhausted)
        return {
          ok: false,
          code: 11,
          msg: this.operatorError ? `${e.message}; the operator's last error: ${this.operatorError}` : e.message,
        };
      return { ok: false, code: 999, msg: e instanceof Error ? e.message : String(e) };
    }
  }

  private schedulePublish(delay = this.opts.publishDelayMs ?? 50): void {
    if (this.publishTimer) return;
    this.publishTimer = setTimeout(() => {
      this.publishTimer = undefined;
      this.publishing = this.publishing
        .then(() => this.publish())
        .catch((e) => {
          this.log.warn('publishing status.ipam.used failed; retrying', { error: e });
          this.schedulePublish(500);
        });
    }, delay);
  }

  /** Writes status.ipam.used and the handshake answers, re-read on every conflict. */
  private async publish(): Promise<void> {
    try {
      await this.nodes.updateWithRetry(
        this.opts.nodeName,
        (cur) => {
          this.pool.setNode(cur);
          const used = this.pool.usedRecord();
          const answer = this.pool.answerHandshake();
          const ipam = { ...(cur.status?.ipam ?? {}) };
          if (JSON.stringify(ipam.used ?? {}) === JSON.stringify(used) && !answer) return false;
          ipam.used = used;
          if (answer) ipam['release-ips'] = answer;
          cur.status = { ...(cur.status ?? {}), ipam };
          this.writes++;
          return cur;
        },
        { subresource: 'status' },
      );
    } catch (e) {
      if (isNotFound(e)) {
        this.log.warn('CiliumNode gone; recreating');
        await this.ensureNode();
        return;
      }
      throw e;
    }
  }

  private async listen(): Promise<void> {
    const p = this.socketPath;
    fs.mkdirSync(require('node:path').dirname(p), { recursive: true });
    try {
      fs.unlinkSync(p);
    } catch {
      /* none */
    }
    this.server = net.createServer((sock) => {
      let buf = '';
      sock.setEncoding('utf8');
      sock.on('data', (d: string) => {
        buf += d;
        const nl = buf.indexOf('\n');
        if (nl < 0) {
          if (buf.length > 65536) sock.destroy();
          return;
        }
        let reply: AgentReply;
        let req: AgentRequest | undefined;
        try {
          req = JSON.parse(buf.slice(0, nl)) as AgentRequest;
          reply = this.handle(req);
        } catch (e) {
          reply = { ok: false, code: 6, msg: `agent: bad request: ${(e as Error).message}` };
        }
        const done = reply.ok && ((reply.lease && req?.op === 'add') || reply.released?.length) ? this.flush() : Promise.resolve();
        // The answer goes out once `used` is stored, so a restarted agent never hands the same IP twice.
        void done.catch(() => undefined).then(() => sock.end(`${JSON.stringify(reply)}\n`));
      });
      sock.on('error', () => undefined);
    });
    await new Promise<void>((resolve, reject) => {
      this.server!.once('error', reject);
      this.server!.listen(p, () => resolve());
    });
    fs.chmodSync(p, 0o600);
  }
}
