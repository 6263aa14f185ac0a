import { AliyunEniCloud } from '@cnikit/terway';

export type CloudOptions = ConstructorParameters<typeof AliyunEniCloud>[0];

/**
 * terway's cloud client (src/cloud/aliyun.ts over its own OpenAPI client) against an Alibaba Cloud emulator at `endpoint` (`host:port`), as
 * instance i-node1 with the emulator's test keys, polling fast; `over` changes any of it.
 */
export function cloudFor(emulator: { endpoint: string }, over: Partial<CloudOptions> = {}): AliyunEniCloud {
  return new AliyunEniCloud({
    regionId: 'cn-hangzhou',
    instanceId: 'i-node1',
    accessKeyId: 'LTAI-test',
    accessKeySecret: 'test-secret',
    ecsEndpoint: emulator.endpoint,
    vpcEndpoint: emulator.endpoint,
    protocol: 'http',
    pollIntervalMs: 10,
    ...over,
  });
}
