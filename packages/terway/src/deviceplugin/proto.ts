/**
 * The kubelet device-plugin API v1beta1 (k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1/api.proto):
 * services `v1beta1.Registration` (kubelet side) and `v1beta1.DevicePlugin` (plugin side), as a
 * protobuf JSON descriptor with the upstream field names and numbers: the reference codec.ts follows and
 * the tests load into proto-loader and @grpc/grpc-js (a stand-in kubelet, a DevicePlugin client); nothing
 * shipped loads it into a gRPC library.
 */

export const API_VERSION = 'v1beta1';
export const DEVICE_PLUGIN_DIR = '/var/lib/kubelet/device-plugins';
export const KUBELET_SOCKET = 'kubelet.sock';
export const HEALTHY = 'Healthy';
export const UNHEALTHY = 'Unhealthy';

type F = Record<string, string>;
function msg(f: F): { fields: Record<string, { type: string; id: number; rule?: string; keyType?: string }> } {
  const fields: Record<string, { type: string; id: number; rule?: string; keyType?: string }> = {};
  Object.entries(f).forEach(([name, spec], i) => {
    const [idStr, type] = spec.split(' ', 2) as [string, string];
    const id = Number(idStr) || i + 1;
    if (type.startsWith('repeated:')) fields[name] = { type: type.slice(9), id, rule: 'repeated' };
    else if (type.startsWith('map:')) fields[name] = { type: type.slice(4), id, keyType: 'string' };
    else fields[name] = { type, id };
  });
  return { fields };
}

export const DEVICE_PLUGIN_DESCRIPTOR = {
  nested: {
    v1beta1: {
      nested: {
        Registration: { methods: { Register: { requestType: 'RegisterRequest', responseType: 'Empty' } } },
        DevicePlugin: {
          methods: {
            GetDevicePluginOptions: { requestType: 'Empty', responseType: 'DevicePluginOptions' },
            ListAndWatch: { requestType: 'Empty', responseType: 'ListAndWatchResponse', responseStream: true },
            GetPreferredAllocation: { requestType: 'PreferredAllocationRequest', responseType: 'PreferredAllocationResponse' },
            Allocate: { requestType: 'AllocateRequest', responseType: 'AllocateResponse' },
            PreStartContainer: { requestType: 'PreStartContainerRequest', responseType: 'PreStartContainerResponse' },
          },
        },
        DevicePluginOptions: msg({ pre_start_required: '1 bool', get_preferred_allocation_available: '2 bool' }),
        RegisterRequest: msg({ version: '1 string', endpoint: '2 string', resource_name: '3 string', options: '4 DevicePluginOptions' }),
        Empty: { fields: {} },
        ListAndWatchResponse: msg({ devices: '1 repeated:Device' }),
        TopologyInfo: msg({ nodes: '1 repeated:NUMANode' }),
        NUMANode: msg({ ID: '1 int64' }),
        Device: msg({ ID: '1 string', health: '2 string', topology: '3 TopologyInfo' }),
        PreStartContainerRequest: msg({ devices_ids: '1 repeated:string' }),
        PreStartContainerResponse: { fields: {} },
        PreferredAllocationRequest: msg({ container_requests: '1 repeated:ContainerPreferredAllocationRequest' }),
        ContainerPreferredAllocationRequest: msg({
          available_deviceIDs: '1 repeated:string',
          must_include_deviceIDs: '2 repeated:string',
          allocation_size: '3 int32',
        }),
        PreferredAllocationResponse: msg({ container_responses: '1 repeated:ContainerPreferredAllocationResponse' }),
        ContainerPreferredAllocationResponse: msg({ deviceIDs: '1 repeated:string' }),
        AllocateRequest: msg({ container_requests: '1 repeated:ContainerAllocateRequest' }),
        ContainerAllocateRequest: msg({ devices_ids: '1 repeated:string' }),
        CDIDevice: msg({ name: '1 string' }),
        AllocateResponse: msg({ container_responses: '1 repeated:ContainerAllocateResponse' }),
        ContainerAllocateResponse: msg({
          envs: '1 map:string',
          mounts: '2 repeated:Mount',
          devices: '3 repeated:DeviceSpec',
          annotations: '4 map:string',
          cdi_devices: '5 repeated:CDIDevice',
        }),
        Mount: msg({ container_path: '1 string', host_path: '2 string', read_only: '3 bool' }),
        DeviceSpec: msg({ container_path: '1 string', host_path: '2 string', permissions: '3 string' }),
      },
    },
  },
};

export interface Device {
  ID: string;
  health: string;
}
