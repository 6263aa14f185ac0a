/**
 * The kubelet device-plugin API v1beta1's messages that terway's plugins send and read, hand-written on
 * @cnikit/unary-grpc's protobuf primitives, field numbers as in k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1
 * api.proto (and proto.ts's descriptor): RegisterRequest (to the kubelet), the DevicePlugin service's
 * requests read (AllocateRequest; the others' requests are not looked at) and replies written.
 * test/deviceplugin-codec.test.ts checks each against proto-loader.
 */
import { ProtoWriter, protoBytes, protoFields, protoString } from '@cnikit/unary-grpc';
import type { Device } from './proto';

export interface DevicePluginOptions {
  pre_start_required: boolean;
  get_preferred_allocation_available: boolean;
}

/** DevicePluginOptions: pre_start_required = 1, get_preferred_allocation_available = 2. */
export function encodeDevicePluginOptions(o: DevicePluginOptions): Buffer {
  return new ProtoWriter().bool(1, o.pre_start_required).bool(2, o.get_preferred_allocation_available).finish();
}

export interface RegisterRequest {
  version: string;
  endpoint: string;
  resource_name: string;
  options: DevicePluginOptions;
}

/** RegisterRequest: version = 1, endpoint = 2, resource_name = 3, options = 4 (DevicePluginOptions). */
export function encodeRegisterRequest(r: RegisterRequest): Buffer {
  return new ProtoWriter()
    .bytes(1, r.version)
    .bytes(2, r.endpoint)
    .bytes(3, r.resource_name)
    .bytes(4, encodeDevicePluginOptions(r.options), true)
    .finish();
}

/** ListAndWatchResponse: devices = 1 (repeated Device: ID = 1, health = 2, topology = 3 left out). */
export function encodeListAndWatchResponse(devices: Device[]): Buffer {
  const w = new ProtoWriter();
  for (const d of devices) w.bytes(1, new ProtoWriter().bytes(1, d.ID).bytes(2, d.health).finish(), true);
  return w.finish();
}

/** AllocateRequest: container_requests = 1 (repeated ContainerAllocateRequest: devices_ids = 1, repeated string). */
export function decodeAllocateRequest(buf: Buffer): { container_requests: { devices_ids: string[] }[] } {
  const container_requests: { devices_ids: string[] }[] = [];
  for (const f of protoFields(buf)) {
    if (f.field !== 1) continue;
    const devices_ids: string[] = [];
    for (const g of protoFields(protoBytes(f.value))) if (g.field === 1) devices_ids.push(protoString(g.value));
    container_requests.push({ devices_ids });
  }
  return { container_requests };
}

/**
 * AllocateResponse: container_responses = 1, one empty ContainerAllocateResponse per container request
 * (no envs, mounts, devices, annotations or CDI devices: the device only makes the scheduler count).
 */
export function encodeEmptyAllocateResponse(containers: number): Buffer {
  const w = new ProtoWriter();
  for (let i = 0; i < containers; i++) w.bytes(1, Buffer.alloc(0), true);
  return w.finish();
}

/** Empty, PreStartContainerResponse, and a PreferredAllocationResponse without container_responses: no fields. */
export const EMPTY = Buffer.alloc(0);
