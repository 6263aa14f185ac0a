import { ConfigError } from '@cnikit/netlib';
import { hijackSubnets, parseMetaConfig, tableForInterface } from '@cnikit/meta';

const base = { overlay_hijack_subnet: ['10.244.0.0/16'], service_hijack_subnet: ['10.96.0.0/12'] };

describe('parseMetaConfig', () => {
  it('applies the anchor defaults', () => {
    const c = parseMetaConfig(base, 'veth');
    expect(c).toEqual({
      overlayHijackSubnet: ['10.244.0.0/16'],
      serviceHijackSubnet: ['10.96.0.0/12'],
      additionalHijackSubnet: [],
      migrateRoute: -1,
      skipCall: false,
      rpFilter: { setHost: true, value: 2 },
      logOptions: { level: 'debug', file: '/var/log/meta-plugins/veth.log', maxSizeMiB: 100, maxAgeDays: 5, maxCount: 10 },
    });
  });

  it('takes every field', () => {
    const c = parseMetaConfig(
      {
        ...base,
        overlay_hijack_subnet: ['10.244.0.0/16', 'fd00:244::/64'],
        additional_hijack_subnet: ['172.20.0.0/16'],
        migrate_route: 0,
        skip_call: true,
        rp_filter: { set_host: false, value: 0 },
        log_options: { log_level: 'INFO', log_file: '/tmp/x.log', log_max_size: 5, log_max_age: 2, log_max_count: 3 },
      },
      'router',
    );
    expect(c.overlayHijackSubnet).toEqual(['10.244.0.0/16', 'fd00:244::/64']);
    expect(c.migrateRoute).toBe(0);
    expect(c.skipCall).toBe(true);
    expect(c.rpFilter).toEqual({ setHost: false, value: 0 });
    expect(c.logOptions).toEqual({ level: 'info', file: '/tmp/x.log', maxSizeMiB: 5, maxAgeDays: 2, maxCount: 3 });
    expect(hijackSubnets(c)).toEqual(['10.244.0.0/16', 'fd00:244::/64', '10.96.0.0/12', '172.20.0.0/16']);
  });

  // Each bad value names its own field (the anchor swapped the service/overlay messages).
  const bad: [string, Record<string, unknown>, string][] = [
    ['missing overlay', { service_hijack_subnet: ['10.96.0.0/12'] }, 'overlay_hijack_subnet'],
    ['missing service', { overlay_hijack_subnet: ['10.244.0.0/16'] }, 'service_hijack_subnet'],
    ['empty service', { ...base, service_hijack_subnet: [] }, 'service_hijack_subnet'],
    ['service not a list', { ...base, service_hijack_subnet: '10.96.0.0/12' }, 'service_hijack_subnet'],
    ['bad overlay CIDR', { ...base, overlay_hijack_subnet: ['10.244.0.0/33'] }, 'overlay_hijack_subnet[0]'],
    ['garbage CIDR', { ...base, service_hijack_subnet: ['10.96.0.0/12', 'nonsense'] }, 'service_hijack_subnet[1]'],
    ['host bits set', { ...base, overlay_hijack_subnet: ['10.244.1.1/16'] }, 'overlay_hijack_subnet[0]'],
    ['bad additional', { ...base, additional_hijack_subnet: ['1.2.3/8'] }, 'additional_hijack_subnet[0]'],
    ['migrate 2', { ...base, migrate_route: 2 }, 'migrate_route'],
    ['migrate string', { ...base, migrate_route: '1' }, 'migrate_route'],
    ['skip_call string', { ...base, skip_call: 'yes' }, 'skip_call'],
    ['rp_filter 3', { ...base, rp_filter: { value: 3 } }, 'rp_filter.value'],
    ['rp_filter set_host', { ...base, rp_filter: { set_host: 1 } }, 'rp_filter.set_host'],
    ['rp_filter unknown key', { ...base, rp_filter: { vaule: 1 } }, 'rp_filter.vaule'],
    ['rp_filter not object', { ...base, rp_filter: 2 }, 'rp_filter'],
    ['log level', { ...base, log_options: { log_level: 'loud' } }, 'log_options.log_level'],
    ['log file relative', { ...base, log_options: { log_file: 'x.log' } }, 'log_options.log_file'],
    ['log size 0', { ...base, log_options: { log_max_size: 0 } }, 'log_options.log_max_size'],
    ['log count float', { ...base, log_options: { log_max_count: 1.5 } }, 'log_options.log_max_count'],
  ];
  it.each(bad)('rejects %s', (_name, raw, field) => {
    let err: unknown;
    try {
      parseMetaConfig(raw, 'veth');
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(ConfigError);
    expect((err as ConfigError).field).toBe(field);
    expect((err as ConfigError).code).toBe(7);
    expect((err as ConfigError).message).toContain(field);
  });
});

describe('tableForInterface', () => {
  it.each([
    ['net1', 100],
    ['net2', 101],
    ['net10', 109],
    ['eth0', 99],
    ['eth1', 100],
    ['macvlan', 99],
  ])('%s -> %d', (name, table) => expect(tableForInterface(name)).toBe(table));
});
