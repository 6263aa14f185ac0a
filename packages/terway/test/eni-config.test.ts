/** The eni-config ConfigMap: parsing (table), loading through a stand-in API server, writing 10-terway.conf. */
import * as fs from 'node:fs';
import * as http from 'node:http';
import * as os from 'node:os';
import * as path from 'node:path';
import { standInTransport } from '@cnikit/kube-testing';
import { loadEniConfigMap, parseEniConfigData, writeCniConf } from '../src/daemon/eni-config';

const cniConf = JSON.stringify({
  cniVersion: '0.4.0',
  name: 'terway',
  type: 'terway',
  eniip_virtual_type: 'Veth',
  capabilities: { bandwidth: true },
});
const eniConf = JSON.stringify({
  version: '1',
  max_pool_size: 5,
  min_pool_size: 0,
  vswitches: { 'cn-hangzhou-i': ['vsw-1'] },
  service_cidr: '172.21.0.0/20',
  security_group: 'sg-1',
});

it('parses eni_conf and 10-terway.conf', () => {
  const c = parseEniConfigData({ eni_conf: eniConf, '10-terway.conf': cniConf, disable_network_policy: 'true' });
  expect(c.eniConf['max_pool_size']).toBe(5);
  expect(c.cniConf).toBe(cniConf);
});

it.each([
  [{}, /eni-config\.data\.eni_conf/],
  [{ eni_conf: '{max_pool_size: 5}' }, /eni_conf.*JSON object/],
  [{ eni_conf: '{"max_pool_size": -2}' }, /max_pool_size/],
  [{ eni_conf: '{}', '10-terway.conf': '{"type": "bridge", "name": "x", "cniVersion": "1.0.0"}' }, /10-terway\.conf.*type "terway"/],
])('rejects %j', (data, re) => {
  expect(() => parseEniConfigData(data as Record<string, string>)).toThrow(re);
});

it('loads the ConfigMap from the API and writes the CNI config', async () => {
  const srv = http.createServer((req, res) => {
    const ok = req.url?.startsWith('/api/v1/namespaces/kube-system/configmaps/eni-config');
    res.writeHead(ok ? 200 : 404, { 'content-type': 'application/json' });
    res.end(
      JSON.stringify(
        ok
          ? {
              apiVersion: 'v1',
              kind: 'ConfigMap',
              metadata: { name: 'eni-config', namespace: 'kube-system' },
              data: { eni_conf: eniConf, '10-terway.conf': cniConf },
            }
          : { kind: 'Status', code: 404, reason: 'NotFound' },
      ),
    );
  });
  const transport = await standInTransport(srv);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'terway-cm-'));
  try {
    const c = await loadEniConfigMap(transport);
    expect(c.eniConf['service_cidr']).toBe('172.21.0.0/20');
    const file = writeCniConf(dir, c.cniConf!);
    expect(JSON.parse(fs.readFileSync(file, 'utf8'))).toMatchObject({ type: 'terway', name: 'terway' });
    expect(path.basename(file)).toBe('10-terway.conf');
  } finally {
    srv.closeAllConnections();
    await new Promise((r) => srv.close(r));
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
