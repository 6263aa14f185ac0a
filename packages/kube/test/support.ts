// Shared by the kube test files: the cluster started by globalSetup, and typed definitions for the sample CRD.
import * as fs from 'node:fs';
import * as path from 'node:path';
import { crdsIn, defineResource, parseManifests, type CustomObject, type CustomResourceDefinition } from '@cnikit/kube';
import { testCluster } from '@cnikit/kube-testing';

export const cluster = testCluster();

export const SAMPLE_CRD_FILE = path.join(__dirname, '../config/sample-addresspool-crd.yaml');
export const sampleCrd = (): CustomResourceDefinition => crdsIn(parseManifests(fs.readFileSync(SAMPLE_CRD_FILE, 'utf8')))[0]!;

export interface AddressPoolSpec {
  cidr: string;
  blockSizeBits: number;
  replicas?: number;
  blocks?: string[];
}
export interface AddressPoolStatus {
  replicas?: number;
  selector?: string;
  allocatedBlocks?: number;
  observedGeneration?: number;
  conditions?: { type: string; status: 'True' | 'False' | 'Unknown'; reason?: string; message?: string; lastTransitionTime?: string }[];
}
export type AddressPool = CustomObject<AddressPoolSpec, AddressPoolStatus>;

/** The sample CRD's resource as code defines it (client.test checks it against the YAML manifest). */
export const AddressPools = defineResource<AddressPool>({
  group: 'kit.cnikit.io',
  version: 'v1alpha1',
  kind: 'AddressPool',
  plural: 'addresspools',
  namespaced: false,
  shortNames: ['apool'],
  categories: ['cnikit'],
});

export { eventually } from '@cnikit/kube-testing';
