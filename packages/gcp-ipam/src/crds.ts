/**
 * The CRD manifests (apiextensions.k8s.io/v1, structural schemas, CEL rules), generated from one definition;
 * config/crds.yaml is their YAML form (a test keeps the two equal). `kubectl get ipp` shows pools with their
 * counters, `kubectl get ipa -l ipam.gcp-cni.cast.ai/node=<node>` a node's allocations with pod and phase.
 */
import { crdManifest, type CustomResourceDefinition, type JSONSchemaProps } from '@cnikit/kube';
import { GROUP, VERSION } from './types';

const str = { type: 'string' as const };
const IPV4 = '^(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])(\\.(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])){3}$';
const CIDR4 = IPV4.replace(/\$$/, '') + '/([0-9]|[12][0-9]|3[0-2])$';

/** The schema of a resource of ours: its spec, required, and its status when it has one. */
function resourceSchema(spec: JSONSchemaProps, status?: JSONSchemaProps): JSONSchemaProps {
  return { type: 'object', required: ['spec'], properties: { spec, ...(status ? { status } : {}) } };
}

export const ippoolCrd: CustomResourceDefinition = crdManifest(
  { group: GROUP, version: VERSION, kind: 'IPPool', plural: 'ippools', namespaced: false, shortNames: ['ipp'] },
  {
    schema: resourceSchema(
      {
        type: 'object',
        required: ['cidr', 'subnet', 'secondaryRangeName'],
        properties: {
          cidr: { type: 'string', pattern: CIDR4, description: 'The pool: the subnet secondary range, e.g. 10.111.0.0/16.' },
          subnet: { type: 'string', pattern: '^projects/[^/]+/regions/[^/]+/subnetworks/[^/]+$' },
          secondaryRangeName: { type: 'string', pattern: '^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$' },
        },
        'x-kubernetes-validations': [{ rule: 'self.cidr == oldSelf.cidr', message: 'spec.cidr is immutable' }],
      },
      {
        type: 'object',
        properties: {
          capacity: { type: 'integer' },
          allocated: { type: 'integer' },
          available: { type: 'integer' },
          lastUpdated: { type: 'string', format: 'date-time' },
        },
      },
    ),
    printerColumns: [
      { name: 'CIDR', type: 'string', jsonPath: '.spec.cidr' },
      { name: 'Range', type: 'string', jsonPath: '.spec.secondaryRangeName' },
      { name: 'Capacity', type: 'integer', jsonPath: '.status.capacity' },
      { name: 'Allocated', type: 'integer', jsonPath: '.status.allocated' },
      { name: 'Available', type: 'integer', jsonPath: '.status.available' },
    ],
  },
);

export const ipallocationCrd: CustomResourceDefinition = crdManifest(
  { group: GROUP, version: VERSION, kind: 'IPAllocation', plural: 'ipallocations', namespaced: false, shortNames: ['ipa'] },
  {
    status: false,
    schema: resourceSchema({
      type: 'object',
      required: ['pool', 'ip', 'nodeName', 'instance', 'containerID', 'phase'],
      properties: {
        pool: str,
        ip: { type: 'string', pattern: IPV4 },
        podName: str,
        podNamespace: str,
        podUID: str,
        podOwnerUID: str,
        nodeName: str,
        instance: str,
        zone: str,
        containerID: str,
        ifName: str,
        allocatedAt: { type: 'string', format: 'date-time' },
        phase: { type: 'string', enum: ['Allocated', 'Migrating'] },
        movingOut: { type: 'boolean' },
        migration: { type: 'object', properties: { fromInstance: str, fromPod: str, fromPodUID: str, startedAt: str } },
      },
      'x-kubernetes-validations': [
        { rule: 'self.ip == oldSelf.ip && self.pool == oldSelf.pool', message: 'spec.ip and spec.pool are immutable' },
      ],
    }),
    printerColumns: [
      { name: 'IP', type: 'string', jsonPath: '.spec.ip' },
      { name: 'Pod', type: 'string', jsonPath: '.spec.podName' },
      { name: 'Namespace', type: 'string', jsonPath: '.spec.podNamespace' },
      { name: 'Node', type: 'string', jsonPath: '.spec.nodeName' },
      { name: 'Phase', type: 'string', jsonPath: '.spec.phase' },
    ],
  },
);

export const crds = [ippoolCrd, ipallocationCrd];
