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
import { unaryCall } from '@cnikit/unary-grpc';
import { GrpcStatusError } from '@cnikit/unary-grpc/server';
import { GrpcServer, type ServerStreamWriter } from '@cnikit/unary-grpc/server';
import { sleep } from '@cnikit/netlib/retry';
import { API_VERSION, HEALTHY, KUBELET_SOCKET, type Device } from './proto';
import {
  EMPTY,
  decodeAllocateRequest,
  encodeDevicePluginOptions,
  encodeEmptyAllocateResponse,
  encodeListAndWatchResponse,
  encodeRegisterRequest,
} from './codec';

export const ENI_RESOURCE = 'aliyun/eni';
export const MEMBER_ENI_RESOURCE = 'aliyun/member-eni';

const INVALID_ARGUMENT = 3;
const INTERNAL = 13;
const OPTIONS = { pre_start_required: false, get_preferred_allocation_available: false };
const REGISTER_TIMEOUT_MS = 10_000;

export interface DevicePluginOptions {
  resourceName: string;
  /** The kubelet's device-plugin directory (default /var/lib/kubelet/device-plugins). */
  dir: string;
  count: number;
}

export class EniDevicePlugin {
  /** v1beta1.DevicePlugin on @cnikit/unary-grpc's GrpcServer (ListAndWatch streams), codec.ts's messages. */
  private readonly server = new GrpcServer();
  private readonly streams = new Set<ServerStreamWriter>();
  private count: number;
  private watcher: fs.FSWatcher | undefined;
  readonly socket: string;
  /** Registrations made (the first, then one per kubelet restart). */
  registrations = 0;

  constructor(private readonly opts: DevicePluginOptions) {
    this.count = opts.count;
    this.socket = path.join(opts.dir, `terway-${opts.resourceName.split('/').pop()}.sock`);
    this.server
      .addService('v1beta1.DevicePlugin', {
        GetDevicePluginOptions: async () => encodeDevicePluginOptions(OPTIONS),
        GetPreferredAllocation: async () => EMPTY,
        Allocate: async (bytes) => {
          let request: ReturnType<typeof decodeAllocateRequest>;
          try {
            request = decodeAllocateRequest(bytes);
          } catch (e) {
            throw new GrpcStatusError(INTERNAL, `Failed to parse request: ${(e as Error).message}`);
          }
          const known = new Set(this.devices().map((d) => d.ID));
          for (const r of request.container_requests) {
            const bad = r.devices_ids.find((id) => !known.has(id));
            if (bad) throw new GrpcStatusError(INVALID_ARGUMENT, `${opts.resourceName}: unknown device ${bad}`);
          }
          return encodeEmptyAllocateResponse(request.container_requests.length);
        },
        PreStartContainer: async () => EMPTY,
      })
      .addServerStreaming('v1beta1.DevicePlugin', {
        // open for the plugin's life: the devices now, again on every setCount(); ends OK when the plugin
        // stops, and quietly when the kubelet goes away (it calls again after registering anew)
        ListAndWatch: async (_request, call, stream) => {
          this.streams.add(stream);
          try {
            stream.write(encodeListAndWatchResponse(this.devices()));
            await new Promise<void>((resolve) => {
              if (call.signal.aborted || stream.closing.aborted) return resolve();
              call.signal.addEventListener('abort', () => resolve(), { once: true });
              stream.closing.addEventListener('abort', () => resolve(), { once: true });
            });
          } finally {
            this.streams.delete(stream);
          }
        },
      });
  }

  devices(): Device[] {
    return Array.from({ length: this.count }, (_, i) => ({ ID: `${this.opts.resourceName.replace('/', '-')}-${i}`, health: HEALTHY }));
  }

  /** New capacity (e.g. after DescribeInstanceTypes or ENIs attached by others): pushed to every watcher. */
  setCount(n: number): void {
    if (n === this.count) return;
    this.count = n;
    const message = encodeListAndWatchResponse(this.devices());
    for (const s of this.streams) s.write(message);
  }

  /** Serves the plugin socket, then registers with the kubelet. */
  async start(): Promise<void> {
    fs.mkdirSync(this.opts.dir, { recursive: true });
    fs.rmSync(this.socket, { force: true });
    await this.server.listen(this.socket, 0o600);
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

  /** Registers (again: after a kubelet restart its registry is empty): v1beta1.Registration/Register, a unary call on kubelet.sock. */
  async register(): Promise<void> {
    const request = encodeRegisterRequest({
      version: API_VERSION,
      endpoint: path.basename(this.socket),
      resource_name: this.opts.resourceName,
      options: OPTIONS,
    });
    try {
      await unaryCall(path.join(this.opts.dir, KUBELET_SOCKET), '/v1beta1.Registration/Register', request, REGISTER_TIMEOUT_MS);
    } catch (e) {
      throw new Error(`device plugin ${this.opts.resourceName}: register with the kubelet: ${(e as Error).message}`, { cause: e });
    }
    this.registrations++;
  }

  async stop(): Promise<void> {
    this.watcher?.close();
    this.watcher = undefined;
    await this.server.close(); // every ListAndWatch ends with OK trailers
    this.streams.clear();
    fs.rmSync(this.socket, { force: true });
  }
}
