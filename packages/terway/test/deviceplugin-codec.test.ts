/**
 * The device-plugin API's hand-written codec (src/deviceplugin/codec.ts) against proto-loader on the
 * v1beta1 descriptor: what we send decodes there as meant, what the kubelet sends decodes here as it does there.
 */
import * as codec from '../src/deviceplugin/codec';
import { deviceApi } from './grpc-descriptors';

const plugin = deviceApi().DevicePlugin.service;
const registration = deviceApi().Registration.service;

it('RegisterRequest, with DevicePluginOptions set and unset', () => {
  for (const options of [
    { pre_start_required: false, get_preferred_allocation_available: false },
    { pre_start_required: true, get_preferred_allocation_available: true },
  ]) {
    const r = { version: 'v1beta1', endpoint: 'terway-eni.sock', resource_name: 'aliyun/eni', options };
    expect(registration['Register']!.requestDeserialize(codec.encodeRegisterRequest(r))).toEqual(r);
  }
});

it('GetDevicePluginOptions, ListAndWatch, Allocate, GetPreferredAllocation, PreStartContainer replies', () => {
  const o = { pre_start_required: true, get_preferred_allocation_available: false };
  expect(plugin['GetDevicePluginOptions']!.responseDeserialize(codec.encodeDevicePluginOptions(o))).toEqual(o);
  const devices = [
    { ID: 'aliyun-eni-0', health: 'Healthy' },
    { ID: 'aliyun-eni-1', health: 'Unhealthy' },
  ];
  expect(plugin['ListAndWatch']!.responseDeserialize(codec.encodeListAndWatchResponse(devices))).toEqual({
    devices: devices.map((d) => ({ ...d, topology: null })),
  });
  expect(plugin['ListAndWatch']!.responseDeserialize(codec.encodeListAndWatchResponse([]))).toEqual({ devices: [] });
  const empty = { envs: {}, mounts: [], devices: [], annotations: {}, cdi_devices: [] };
  expect(plugin['Allocate']!.responseDeserialize(codec.encodeEmptyAllocateResponse(2))).toEqual({ container_responses: [empty, empty] });
  // what grpc-js sent for the same reply decodes the same
  expect(plugin['Allocate']!.responseDeserialize(plugin['Allocate']!.responseSerialize({ container_responses: [empty, empty] }))).toEqual(
    plugin['Allocate']!.responseDeserialize(codec.encodeEmptyAllocateResponse(2)),
  );
  expect(plugin['GetPreferredAllocation']!.responseDeserialize(codec.EMPTY)).toEqual({ container_responses: [] });
  expect(plugin['PreStartContainer']!.responseDeserialize(codec.EMPTY)).toEqual({});
});

it('AllocateRequest as the kubelet encodes it', () => {
  for (const req of [
    { container_requests: [{ devices_ids: ['aliyun-eni-0', 'aliyun-eni-3'] }, { devices_ids: [] }, { devices_ids: ['x'] }] },
    { container_requests: [] },
  ]) {
    expect(codec.decodeAllocateRequest(plugin['Allocate']!.requestSerialize(req))).toEqual(req);
  }
  expect(() => codec.decodeAllocateRequest(Buffer.from([0x0a, 0x05, 0x0a]))).toThrow(RangeError);
});
