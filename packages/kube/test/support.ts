// Shared by the kube test files: the cluster started by globalSetup, and typed definitions for the sample CRD.
import * as fs from 'node:fs';
import * as path from 'node:path';
import { crdsIn, parseManifests, type CustomObject, type CustomResourceDefinition } from '@cnikit/kube';
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

export { eventually } from '@cnikit/kube-testing';
