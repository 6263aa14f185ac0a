// Shared by the kube test files: the cluster started by globalSetup, and typed definitions for the sample CRD.
import * as fs from 'node:fs';
import * as path from 'node:path';
import { crdsIn, parseManifests, type CustomObject, type CustomResourceDefinition } from '@cnikit/kube';
import { testCluster } from '@cnikit/kube/testing';

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

/** Polls fn until it returns a truthy value (returned) or the timeout passes (throws with the last value). */
export async function eventually<T>(what: string, fn: () => T | Promise<T>, timeoutMs = 15_000, everyMs = 50): Promise<NonNullable<T>> {
  const deadline = Date.now() + timeoutMs;
  let last: T | undefined;
  let lastErr: unknown;
  for (;;) {
    try {
      last = await fn();
      if (last) return last as NonNullable<T>;
    } catch (err) {
      lastErr = err;
    }
    if (Date.now() > deadline) {
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what} (last value ${JSON.stringify(last)}${lastErr ? `, last error ${(lastErr as Error).message}` : ''})`);
    }
    await new Promise((r) => setTimeout(r, everyMs));
  }
}
