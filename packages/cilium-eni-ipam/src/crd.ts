/** The CiliumNode CRD manifest (structural schema; pool/used/enis are maps keyed by IP or ENI id). */
import { crdManifest, type CustomResourceDefinition, type JSONSchemaProps } from '@cnikit/kube';
import { CiliumNodes, RELEASE_STATES } from './types';

const str: JSONSchemaProps = { type: 'string' };
const strList: JSONSchemaProps = { type: 'array', items: str };
const strMap: JSONSchemaProps = { type: 'object', additionalProperties: str };
const count: JSONSchemaProps = { type: 'integer', minimum: 0 };
const allocation: JSONSchemaProps = { type: 'object', properties: { owner: str, resource: str } };

const eni: JSONSchemaProps = {
  type: 'object',
  required: ['id'],
  properties: {
    id: str,
    ip: str,
    mac: str,
    number: { type: 'integer', minimum: 0 },
    description: str,
    subnet: { type: 'object', properties: { id: str, cidr: str } },
    vpc: { type: 'object', properties: { id: str, 'primary-cidr': str, cidrs: strList } },
    addresses: strList,
    prefixes: strList,
    'security-groups': strList,
    tags: strMap,
  },
};

export const ciliumNodeSchema: JSONSchemaProps = {
  type: 'object',
  properties: {
    spec: {
      type: 'object',
      properties: {
        'instance-id': str,
        ipam: {
          type: 'object',
          properties: {
            pool: { type: 'object', additionalProperties: allocation },
            'min-allocate': count,
            'max-allocate': count,
            'pre-allocate': count,
            'max-above-watermark': count,
          },
        },
        eni: {
          type: 'object',
          properties: {
            'instance-id': str,
            'instance-type': str,
            'vpc-id': str,
            'availability-zone': str,
            'node-subnet-id': str,
            'first-interface-index': count,
            'subnet-ids': strList,
            'subnet-tags': strMap,
            'security-groups': strList,
            'security-group-tags': strMap,
            'exclude-interface-tags': strMap,
            'delete-on-termination': { type: 'boolean' },
            'use-primary-address': { type: 'boolean' },
            'use-prefix-delegation': { type: 'boolean' },
          },
        },
      },
    },
    status: {
      type: 'object',
      properties: {
        ipam: {
          type: 'object',
          properties: {
            used: { type: 'object', additionalProperties: allocation },
            'operator-status': { type: 'object', properties: { error: str } },
            'release-ips': { type: 'object', additionalProperties: { type: 'string', enum: [...RELEASE_STATES] } },
          },
        },
        eni: { type: 'object', properties: { enis: { type: 'object', additionalProperties: eni } } },
      },
    },
  },
};

export function ciliumNodeCrd(): CustomResourceDefinition {
  return crdManifest(CiliumNodes, {
    schema: ciliumNodeSchema,
    status: true,
    printerColumns: [
      { name: 'InstanceID', type: 'string', jsonPath: '.spec.instance-id' },
      { name: 'Type', type: 'string', jsonPath: '.spec.eni.instance-type' },
    ],
  });
}
