/**
 * Terway's device plugins: `aliyun/eni` (exclusive ENIs the node can still
 * attach) and `aliyun/member-eni` (trunk member ENIs). Each serves
 * v1beta1.DevicePlugin on its own socket in the kubelet's device-plugin
 * directory and registers with the kubelet's v1beta1.Registration.
 * ListAndWatch sends one "Healthy" device per unit of quota and sends again
 * whenever setCount() changes it; Allocate accepts any of them (the ENI itself
 * is chosen at CNI ADD time, the device only makes the scheduler count).
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { API_VERSION, deviceApi, HEALTHY, KUBELET_SOCKET, type Device } from './proto';
import { sleep } from '@cnikit/netlib/retry';

export const ENI_RESOURCE = 'aliyun/eni';
export const MEMBER_ENI_RESOURCE = 'aliyun/member-eni';

export interface DevicePluginOptions {
  resourceName: string;
  /** The kubelet's device-plugin directory (default /var/lib/kubelet/device-plugins). */
  dir: string;
  count: number;
}

export class EniDevicePlugin {
  private readonly server = new grpc.Server();
  private readonly streams = new Set<grpc.ServerWritableStream<unknown, { devices: Device[] }>>();
  private count: number;
  private watcher: fs.FSWatcher | undefined;
  readonly socket: string;
  /** Registrations made (the first, then one per kubelet restart). */
  registrations = 0;

  constructor(private readonly opts: DevicePluginOptions) {
    this.count = opts.count;
    this.socket = path.join(opts.dir, `terway-${opts.resourceName.split('/').pop()}.sock`);
    const api = deviceApi();
    this.server.addService(api.DevicePlugin.service, {
      GetDevicePluginOptions: (_c: unknown, cb: grpc.sendUnaryData<unknown>) =>
        cb(null, { pre_start_required: false, get_preferred_allocation_available: false }),
      ListAndWatch: (call: grpc.ServerWritableStream<unknown, { devices: Device[] }>) => {
        this.streams.add(call);
        call.write({ devices: this.devices() });
        call.on('cancelled', () => this.streams.delete(call));
        call.on('close', () => this.streams.delete(call));
      },
      GetPreferredAllocation: (_c: unknown, cb: grpc.sendUnaryData<unknown>) => cb(null, { container_responses: [] }),
      Allocate: (
        call: grpc.ServerUnaryCall<{ container_requests: { devices_ids: string[] }[] }, unknown>,
        cb: grpc.sendUnaryData<unknown>,
      ) => {
        const known = new Set(this.devices().map((d) => d.ID));
        for (const r of call.request.container_requests) {
          const bad = r.devices_ids.find((id) => !known.has(id));
          if (bad) return cb({ code: grpc.status.INVALID_ARGUMENT, details: `${opts.resourceName}: unknown device ${bad}` });
        }
        cb(null, {
          container_responses: call.request.container_requests.map(() => ({
            envs: {},
            mounts: [],
            devices: [],
            annotations: {},
            cdi_devices: [],
          })),
        });
      },
      PreStartContainer: (_c: unknown, cb: grpc.sendUnaryData<unknown>) => cb(null, {}),
    });
  }

  devices(): Device[] {
    return Array.from({ length: this.count }, (_, i) => ({ ID: `${this.opts.resourceName.replace('/', '-')}-${i}`, health: HEALTHY }));
  }

  /** New capacity (e.g. after DescribeInstanceTypes or ENIs attached by others): pushed to every watcher. */
  setCount(n: number): void {
    if (n === this.count) return;
    this.count = n;
    for (const s of this.streams) s.write({ devices: this.devices() });
  }

  /** Serves the plugin socket, then registers with the kubelet. */
  async start(): Promise<void> {
    fs.mkdirSync(this.opts.dir, { recursive: true });
    fs.rmSync(this.socket, { force: true });
    await new Promise<void>((resolve, reject) =>
      this.server.bindAsync(`unix://${this.socket}`, grpc.ServerCredentials.createInsecure(), (e) => (e ? reject(e) : resolve())),
    );
    await this.register();
    this.watchKubelet();
  }

  /**
   * A kubelet restart recreates kubelet.sock and forgets every plugin: when
   * the socket appears again, register again (as the upstream plugins do).
   */
  private watchKubelet(): void {
    const kubeletSock = path.join(this.opts.dir, KUBELET_SOCKET);
    let inode = fs.statSync(kubeletSock, { throwIfNoEntry: false })?.ino;
    this.watcher = fs.watch(this.opts.dir, (_ev, file) => {
      if (file !== KUBELET_SOCKET) return;
      const st = fs.statSync(kubeletSock, { throwIfNoEntry: false });
      if (!st) {
        inode = undefined; // gone: the next socket is a new kubelet even if its inode number is reused
        return;
      }
      if (st.ino === inode) return;
      inode = st.ino;
      void this.registerWithRetry();
    });
  }

  /** The socket file appears before the kubelet listens on it: a few tries, 100 ms apart. */
  private async registerWithRetry(tries = 20): Promise<void> {
    for (let i = 0; i < tries && this.watcher; i++) {
      try {
        await this.register();
        return;
      } catch {
        await sleep(100);
      }
    }
  }

  /** Registers (again: after a kubelet restart its registry is empty). */
  async register(): Promise<void> {
    const client = new (deviceApi().Registration)(`unix://${path.join(this.opts.dir, KUBELET_SOCKET)}`, grpc.credentials.createInsecure());
    try {
      await new Promise<void>((resolve, reject) =>
        (client as unknown as { Register(r: unknown, o: grpc.CallOptions, cb: (e: Error | null) => void): void }).Register(
          {
            version: API_VERSION,
            endpoint: path.basename(this.socket),
            resource_name: this.opts.resourceName,
            options: { pre_start_required: false, get_preferred_allocation_available: false },
          },
          { deadline: Date.now() + 10_000 },
          (e) =>
            e
              ? reject(new Error(`device plugin ${this.opts.resourceName}: register with the kubelet: ${e.message}`))
              : (this.registrations++, resolve()),
        ),
      );
    } finally {
      client.close();
    }
  }

  async stop(): Promise<void> {
    this.watcher?.close();
    this.watcher = undefined;
    for (const s of this.streams) s.end();
    this.streams.clear();
    await new Promise<void>((r) => this.server.tryShutdown(() => r()));
    fs.rmSync(this.socket, { force: true });
  }
}
