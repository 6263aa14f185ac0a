// gcp-ipam on the lab's nodes as on GKE, shared by the node tier (e2e/node/gcp-ipam.test.ts) and the pod
// benchmark (pod-bench.ts): the conflist GKE writes on a node, the GCE emulator program on the host leg with its
// alias hooks routing on the fabric as the VPC does, and packages/gcp-ipam/config/deploy.yaml with its
// ConfigMap set for that emulator. Erasable TypeScript (Node's type stripping runs pod-bench.ts).
import * as fs from 'node:fs';
import * as path from 'node:path';
import { dump, loadAll } from 'js-yaml';
import { startEmulator, type Emulator } from './emulator.ts';
export type { Emulator } from './emulator.ts';
import { HOST_IP, installDebianPlugins, vpcAliasHooks, writeFileAtomic, type Lab, type LabNode } from './lab.ts';

export const GCP = { project: 'lab-project', region: 'europe-west1', zone: 'europe-west1-b', pool: 'ippool-default' };
/** The file the installer rewrites: the conflist GKE's node set-up writes. */
export const GKE_CONFLIST = '10-containerd-net.conflist';

/** The conflist GKE writes on a node before any add-on: ptp + host-local over the node's range, portmap. */
export function writeGkeConflist(node: LabNode): void {
  installDebianPlugins(node, ['ptp', 'host-local', 'portmap']);
  const list = {
    cniVersion: '1.0.0', // what Debian's ptp speaks
    name: 'k8s-pod-network',
    plugins: [
      {
        type: 'ptp',
        mtu: 1460,
        ipMasq: false,
        ipam: { type: 'host-local', ranges: [[{ subnet: node.podSubnet }]], routes: [{ dst: '0.0.0.0/0' }] },
      },
      { type: 'portmap', capabilities: { portMappings: true } },
    ],
  };
  writeFileAtomic(path.join(node.cniConfDir, GKE_CONFLIST), JSON.stringify(list, null, 2));
}

/**
 * `npm run gce-emulator` (tools/emulators/run.mjs) listening on the host leg, the lab's nodes as instances, the
 * VPC's routes on the fabric through its alias hooks. Resolves with its URL once it listens.
 */
export function startGceEmulator(lab: Lab, root: string, opDurationMs: number): Promise<Emulator> {
  const hooks = vpcAliasHooks();
  return startEmulator(root, 'gce-emulator', [
    ...['--listen', `${HOST_IP}:0`, '--project', GCP.project, '--op-duration-ms', String(opDurationMs)],
    ...['--subnet', `${GCP.region}/default=198.51.100.0/24`],
    ...lab.nodes.flatMap((n) => ['--instance', `${GCP.zone}/${n.name}=${n.ip}`]),
    ...['--on-alias-add', hooks.add, '--on-alias-remove', hooks.remove],
  ]);
}

/** packages/gcp-ipam/config/deploy.yaml with its ConfigMap set as a user sets it, here for the emulator at `url`. */
export function gcpDeployYaml(root: string, url: string): string {
  const file = path.join(root, 'packages', 'gcp-ipam', 'config', 'deploy.yaml');
  const docs = loadAll(fs.readFileSync(file, 'utf8')) as { kind: string; data?: Record<string, string> }[];
  const cm = docs.find((d) => d.kind === 'ConfigMap');
  if (!cm) throw new Error(`${file}: no ConfigMap`);
  cm.data = {
    project: GCP.project,
    region: GCP.region,
    subnet: 'default',
    'compute-endpoint': `${url}/compute/v1`,
    'network-connectivity-endpoint': `${url}/v1`,
    'metadata-endpoint': url,
    'ipam.json': JSON.stringify({
      pool: GCP.pool,
      project: GCP.project,
      zone: GCP.zone,
      computeEndpoint: `${url}/compute/v1`,
      metadataEndpoint: url,
      auth: 'metadata', // the token path a VM takes, from the emulated metadata server
    }),
  };
  return docs.map((d) => dump(d)).join('---\n');
}
