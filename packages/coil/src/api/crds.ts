/**
 * The CRD manifests (apiextensions.k8s.io/v1, structural schemas). Validation that Coil does in a webhook
 * is CEL here (Kubernetes' CIDR library): CIDRs of the right family, host bits >= blockSizeBits,
 * dual-stack sizes equal, blockSizeBits immutable and subnets append-only. config/crds.yaml is this, dumped
 * (a test keeps them equal).
 */
import { crdManifest, type CustomResourceDefinition, type JSONSchemaProps } from '@cnikit/kube';
import { AddressBlocks, AddressPools, BlockRequests } from './types';

const cidrString = (family: 4 | 6): JSONSchemaProps => ({
  type: 'string',
  maxLength: 64,
  'x-kubernetes-validations': [
    { rule: `isCIDR(self) && cidr(self).ip().family() == ${family}`, message: `must be an IPv${family} CIDR` },
  ],
});

const hostBits = (v: string, family: 4 | 6): string => `(${family === 4 ? 32 : 128} - cidr(${v}).prefixLength())`;

const poolSchema: JSONSchemaProps = {
  type: 'object',
  required: ['spec'],
  properties: {
    spec: {
      type: 'object',
      required: ['subnets'],
      properties: {
        blockSizeBits: { type: 'integer', minimum: 0, maximum: 128, default: 5 },
        subnets: {
          type: 'array',
          minItems: 1,
          maxItems: 64,
          items: {
            type: 'object',
            properties: { ipv4: cidrString(4), ipv6: cidrString(6) },
            'x-kubernetes-validations': [
              { rule: 'has(self.ipv4) || has(self.ipv6)', message: 'a subnet needs ipv4, ipv6 or both' },
              {
                rule: `!has(self.ipv4) || !has(self.ipv6) || !isCIDR(self.ipv4) || !isCIDR(self.ipv6) || ${hostBits('self.ipv4', 4)} == ${hostBits('self.ipv6', 6)}`,
                message: 'dual-stack subnets must have the same size (host bits) in both families',
              },
            ],
          },
        },
      },
      'x-kubernetes-validations': [
        {
          rule: `self.subnets.all(s, (!has(s.ipv4) || !isCIDR(s.ipv4) || ${hostBits('s.ipv4', 4)} >= self.blockSizeBits) && (!has(s.ipv6) || !isCIDR(s.ipv6) || ${hostBits('s.ipv6', 6)} >= self.blockSizeBits))`,
          message: 'every subnet needs at least blockSizeBits host bits',
        },
        { rule: 'self.blockSizeBits == oldSelf.blockSizeBits', message: 'blockSizeBits is immutable' },
        {
          rule: 'size(self.subnets) >= size(oldSelf.subnets) && oldSelf.subnets.all(o, o in self.subnets)',
          message: 'subnets may only be appended',
        },
      ],
    },
  },
};

const blockSchema: JSONSchemaProps = {
  type: 'object',
  required: ['index'],
  properties: { index: { type: 'integer', minimum: 0 }, ipv4: cidrString(4), ipv6: cidrString(6) },
};

const requestSchema: JSONSchemaProps = {
  type: 'object',
  required: ['spec'],
  properties: {
    spec: {
      type: 'object',
      required: ['nodeName', 'poolName'],
      properties: { nodeName: { type: 'string', minLength: 1 }, poolName: { type: 'string', minLength: 1 } },
      'x-kubernetes-validations': [{ rule: 'self == oldSelf', message: 'spec is immutable' }],
    },
    status: {
      type: 'object',
      properties: {
        addressBlockName: { type: 'string' },
        conditions: {
          type: 'array',
          items: {
            type: 'object',
            required: ['type', 'status'],
            properties: {
              type: { type: 'string', enum: ['Complete', 'Failed'] },
              status: { type: 'string', enum: ['True', 'False', 'Unknown'] },
              reason: { type: 'string' },
              message: { type: 'string' },
              lastProbeTime: { type: 'string', format: 'date-time' },
              lastTransitionTime: { type: 'string', format: 'date-time' },
            },
          },
        },
      },
    },
  },
};

export function coilCrds(): CustomResourceDefinition[] {
  return [
    crdManifest(AddressPools, {
      schema: poolSchema,
      status: false,
      printerColumns: [{ name: 'BlockSizeBits', type: 'integer', jsonPath: '.spec.blockSizeBits' }],
    }),
    crdManifest(AddressBlocks, {
      schema: blockSchema,
      status: false,
      printerColumns: [
        { name: 'Node', type: 'string', jsonPath: `.metadata.labels['coil\\.cybozu\\.com/node']` },
        { name: 'Pool', type: 'string', jsonPath: `.metadata.labels['coil\\.cybozu\\.com/pool']` },
        { name: 'IPv4', type: 'string', jsonPath: '.ipv4' },
        { name: 'IPv6', type: 'string', jsonPath: '.ipv6' },
      ],
    }),
    crdManifest(BlockRequests, { schema: requestSchema, status: true }),
  ];
}
