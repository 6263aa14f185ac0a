/**
 * The CRD manifests (apiextensions.k8s.io/v1, structural schemas). Validation that Coil does in a webhook
 * is CEL here (Kubernetes' CIDR library): CIDRs of the right family, host bits >= blockSizeBits,
 * dual-stack sizes equal, blockSizeBits immutable and subnets append-only; Egress destinations CIDRs,
 * PDB minAvailable/maxUnavailable exclusive. config/crds.yaml is this, dumped
 * (a test keeps them equal).
 */
import { crdManifest, type CustomResourceDefinition, type JSONSchemaProps } from '@cnikit/kube';
import { Egresses } from './egress';
import { AddressBlocks, AddressPools, BlockRequests } from './types';

const cidrString = (family: 4 | 6): JSONSchemaProps => ({
  type: 'string',
  maxLength: 64,
  'x-kubernetes-validations': [{ rule: `isCIDR(self) && cidr(self).ip().family() == ${family}`, message: `must be an IPv${family} CIDR` }],
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

const intOrPercent: JSONSchemaProps = {
  'x-kubernetes-int-or-string': true,
  'x-kubernetes-validations': [
    {
      rule: "type(self) == int ? int(self) >= 0 : string(self).matches('^(100|[1-9]?[0-9])%$')",
      message: 'must be a non-negative integer or a percentage from 0% to 100%',
    },
  ],
};

/** A map of strings (labels, annotations). */
const stringMap: JSONSchemaProps = { type: 'object', additionalProperties: { type: 'string' } };

/**
 * Egress. The pod template's spec is kept as given (a full PodSpec schema would be thousands of lines);
 * the API server validates it when the controller writes the Deployment. Destinations must be canonical
 * CIDRs (no host bits): the client side turns them into routes, which the kernel refuses otherwise.
 */
const egressSchema: JSONSchemaProps = {
  type: 'object',
  required: ['spec'],
  properties: {
    spec: {
      type: 'object',
      required: ['destinations'],
      properties: {
        destinations: {
          type: 'array',
          minItems: 1,
          maxItems: 256,
          items: {
            type: 'string',
            maxLength: 64,
            'x-kubernetes-validations': [
              {
                rule: 'isCIDR(self) && cidr(self) == cidr(self).masked()',
                message: 'must be a CIDR without host bits, e.g. 10.0.0.0/8 or 2001:db8::/32',
              },
            ],
          },
        },
        replicas: { type: 'integer', format: 'int32', minimum: 0, default: 1 },
        strategy: {
          type: 'object',
          properties: {
            type: { type: 'string', enum: ['Recreate', 'RollingUpdate'] },
            rollingUpdate: { type: 'object', properties: { maxSurge: intOrPercent, maxUnavailable: intOrPercent } },
          },
          'x-kubernetes-validations': [
            {
              rule: "!has(self.rollingUpdate) || !has(self.type) || self.type == 'RollingUpdate'",
              message: 'rollingUpdate is only allowed with type RollingUpdate',
            },
          ],
        },
        template: {
          type: 'object',
          properties: {
            metadata: { type: 'object', properties: { labels: stringMap, annotations: stringMap } },
            spec: { type: 'object', 'x-kubernetes-preserve-unknown-fields': true },
          },
        },
        sessionAffinity: { type: 'string', enum: ['ClientIP', 'None'], default: 'ClientIP' },
        sessionAffinityConfig: {
          type: 'object',
          properties: {
            clientIP: { type: 'object', properties: { timeoutSeconds: { type: 'integer', format: 'int32', minimum: 1, maximum: 86400 } } },
          },
        },
        fouSourcePortAuto: { type: 'boolean' },
        podDisruptionBudget: {
          type: 'object',
          properties: { minAvailable: intOrPercent, maxUnavailable: intOrPercent },
          'x-kubernetes-validations': [
            {
              rule: '!(has(self.minAvailable) && has(self.maxUnavailable))',
              message: 'minAvailable and maxUnavailable cannot be both set',
            },
          ],
        },
      },
    },
    status: {
      type: 'object',
      properties: { replicas: { type: 'integer', format: 'int32' }, selector: { type: 'string' } },
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
    crdManifest(Egresses, {
      schema: egressSchema,
      status: true,
      scale: { specReplicasPath: '.spec.replicas', statusReplicasPath: '.status.replicas', labelSelectorPath: '.status.selector' },
      printerColumns: [
        { name: 'Desired', type: 'integer', jsonPath: '.spec.replicas' },
        { name: 'Current', type: 'integer', jsonPath: '.status.replicas' },
        { name: 'Destinations', type: 'string', jsonPath: '.spec.destinations', priority: 1 },
      ],
    }),
  ];
}
