// Configuration files of a lab node (shared/notes/real-node.md explains each non-default value).
import * as path from 'node:path';

interface NodeLike {
  dir: string;
  name: string;
  ip: string;
  podSubnet: string;
  containerdSocket: string;
}

const DISABLED = [
  'io.containerd.nri.v1.nri',
  'io.containerd.snapshotter.v1.btrfs',
  'io.containerd.snapshotter.v1.zfs',
  'io.containerd.snapshotter.v1.devmapper',
  'io.containerd.snapshotter.v1.erofs',
  'io.containerd.differ.v1.erofs',
  'io.containerd.snapshotter.v1.blockfile',
  'io.containerd.tracing.processor.v1.otlp',
  'io.containerd.internal.v1.tracing',
];

/** containerd 2.x, config version 4: every path under the node dir (a top-level [grpc] would be ignored). */
export function containerdConfig(dir: string, sandboxImage: string): string {
  const c = path.join(dir, 'containerd');
  const q = (s: string): string => `'${s}'`;
  return `version = 4
root = ${q(`${c}/root`)}
state = ${q(`${c}/state`)}
temp = ${q(`${c}/tmp`)}
imports = []
disabled_plugins = [${DISABLED.map(q).join(', ')}]
[plugins]
  [plugins.'io.containerd.server.v1.grpc']
    address = ${q(`${c}/containerd.sock`)}
  [plugins.'io.containerd.server.v1.ttrpc']
    address = ${q(`${c}/containerd.sock.ttrpc`)}
  [plugins.'io.containerd.internal.v1.opt']
    path = ${q(`${c}/opt`)}
  # at most 42 characters (containerd refuses longer ones): /run/containerd is the node's own (its mount namespace)
  [plugins.'io.containerd.shim.v1.manager']
    socket_dir = '/run/containerd/s'
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = 'overlayfs'
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = ${q(sandboxImage)}
  [plugins.'io.containerd.cri.v1.runtime']
    # pod netns under /var/run/netns, the node's own /run (lab.ts binds it per node) as on a real node
    netns_mounts_under_state_dir = false
    # runc cannot lower oom_score_adj without CAP_SYS_RESOURCE (sandboxes would fail to start)
    restrict_oom_score_adj = true
    ignore_deprecation_warnings = ['io.containerd.deprecation/cgroup-v1']
    cdi_spec_dirs = []
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = 'runc'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = 'io.containerd.runc.v2'
        sandboxer = 'podsandbox'
        disable_pause_image_pull = true
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          BinaryName = '/usr/sbin/runc'
          Root = ${q(`${c}/runc`)}
          SystemdCgroup = false
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ['/opt/cni/bin']
      conf_dir = '/etc/cni/net.d'
      max_conf_num = 1
  [plugins.'io.containerd.grpc.v1.cri']
    stream_server_address = '127.0.0.1'
    stream_server_port = '0'
`;
}

/** KubeletConfiguration for cgroup v1 without systemd, no swap accounting, no CAP_SYS_RESOURCE. */
export function kubeletConfig(node: NodeLike, caFile: string): string {
  const k = path.join(node.dir, 'kubelet');
  return `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
cgroupRoot: /${node.name}
failCgroupV1: false
failSwapOn: false
oomScoreAdj: 0
containerRuntimeEndpoint: unix://${node.containerdSocket}
imageServiceEndpoint: unix://${node.containerdSocket}
address: ${node.ip}
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
authentication:
  anonymous: { enabled: true }
  webhook: { enabled: false }
  x509: { clientCAFile: ${caFile} }
authorization: { mode: AlwaysAllow }
podLogsDir: ${k}/pod-logs
volumePluginDir: ${k}/volume-plugins
resolvConf: /etc/resolv.conf
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: { memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%" }
maxPods: 250
`;
}

/**
 * bridge + host-local + portmap at CNI 1.0.0 (Debian's plugins speak no later version). The default route in
 * IPAM makes the bridge the pods' gateway, so other nodes' pod subnets are reachable.
 */
export function bridgeConflist(node: NodeLike): string {
  return JSON.stringify(
    {
      cniVersion: '1.0.0',
      name: 'lab-bridge',
      plugins: [
        {
          type: 'bridge',
          bridge: 'klbr0',
          isGateway: true,
          ipMasq: false,
          hairpinMode: true,
          ipam: {
            type: 'host-local',
            dataDir: path.join(node.dir, 'cni', 'ipam'),
            ranges: [[{ subnet: node.podSubnet }]],
            routes: [{ dst: '0.0.0.0/0' }],
          },
        },
        { type: 'portmap', capabilities: { portMappings: true } },
      ],
    },
    null,
    2,
  );
}
