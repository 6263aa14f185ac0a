import { ConfigError } from '../../src/errors';
import type { NetConf } from '../../src/cni/conf';
import { runtimeConfigOf } from '../../src/cni/capabilities';

const conf = (runtimeConfig: unknown): NetConf => ({ cniVersion: '1.1.0', name: 'n', type: 't', runtimeConfig }) as NetConf;

describe('runtimeConfigOf', () => {
  it('returns {} without runtimeConfig', () => {
    expect(runtimeConfigOf(conf(undefined))).toEqual({});
  });

  it('accepts every capability in its documented form', () => {
    const rc = {
      portMappings: [
        { hostPort: 8080, containerPort: 80, protocol: 'tcp', hostIP: '' },
        { hostPort: 5353, containerPort: 53, protocol: 'UDP', hostIP: '192.168.1.10' },
      ],
      ipRanges: [
        [{ subnet: '10.1.0.0/24', rangeStart: '10.1.0.10', rangeEnd: '10.1.0.99', gateway: '10.1.0.1' }],
        [{ subnet: 'fd00::/64' }],
      ],
      bandwidth: { ingressRate: 1_000_000, ingressBurst: 8_000_000, egressRate: 2_000_000, egressBurst: 16_000_000 },
      dns: { servers: ['10.96.0.10'], searches: ['svc.cluster.local'], options: ['ndots:5'] },
      ips: ['10.1.0.5/24', 'fd00::5'],
      mac: 'c2:11:22:33:44:55',
      infinibandGUID: 'c2:11:22:33:44:55:66:77',
      deviceID: '0000:04:00.1',
      cgroupPath: '/kubepods/burstable/pod123',
      aliases: ['web', 'web.local'],
      'io.kubernetes.cri.pod-annotations': { 'k8s.v1.cni.cncf.io/networks': 'macvlan' },
      somethingNew: { kept: true },
    };
    expect(runtimeConfigOf(conf(rc))).toBe(rc as unknown);
  });

  it.each([
    ['runtimeConfig', []],
    ['runtimeConfig.portMappings', {}],
    ['runtimeConfig.portMappings[0]', [1]],
    ['runtimeConfig.portMappings[0].hostPort', [{ hostPort: 0, containerPort: 80, protocol: 'tcp' }]],
    ['runtimeConfig.portMappings[0].containerPort', [{ hostPort: 80, containerPort: 65536, protocol: 'tcp' }]],
    ['runtimeConfig.portMappings[0].protocol', [{ hostPort: 80, containerPort: 80, protocol: 'icmp' }]],
    ['runtimeConfig.portMappings[0].hostIP', [{ hostPort: 80, containerPort: 80, protocol: 'tcp', hostIP: 'localhost' }]],
  ])('rejects %s', (field, portMappings) => {
    const rc = field === 'runtimeConfig' ? portMappings : { portMappings };
    expect(() => runtimeConfigOf(conf(rc))).toThrow(expect.objectContaining({ code: 7, field }));
  });

  it.each([
    ['runtimeConfig.ipRanges[0]', { ipRanges: [{}] }],
    ['runtimeConfig.ipRanges[0][0].subnet', { ipRanges: [[{ subnet: '10.1.0.0' }]] }],
    ['runtimeConfig.ipRanges[0][0].rangeEnd', { ipRanges: [[{ subnet: '10.1.0.0/24', rangeEnd: 'x' }]] }],
    ['runtimeConfig.bandwidth', { bandwidth: 5 }],
    ['runtimeConfig.bandwidth.egressRate', { bandwidth: { egressRate: -1 } }],
    ['runtimeConfig.bandwidth.ingressBurst', { bandwidth: { ingressBurst: 1.5 } }],
    ['runtimeConfig.dns.servers', { dns: { servers: '1.1.1.1' } }],
    ['runtimeConfig.ips[1]', { ips: ['10.1.0.5', 'nope'] }],
    ['runtimeConfig.mac', { mac: 'c2:11:22:33:44' }],
    ['runtimeConfig.deviceID', { deviceID: 4 }],
    ['runtimeConfig.aliases[0]', { aliases: [1] }],
    ['runtimeConfig.io.kubernetes.cri.pod-annotations.a', { 'io.kubernetes.cri.pod-annotations': { a: 1 } }],
  ])('rejects %s', (field, rc) => {
    let err: unknown;
    try {
      runtimeConfigOf(conf(rc));
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(ConfigError);
    expect((err as ConfigError).field).toBe(field);
    expect((err as ConfigError).details).toMatch(/^expected .+, got /);
  });
});
