/**
 * The `ipam` section gcp-ipam reads (the main plugin passes its whole config; only `ipam` is ours):
 *
 *   "ipam": { "type": "gcp-ipam", "kubeconfig": "/etc/cni/net.d/gcp-ipam.kubeconfig", "pool": "ippool-default",
 *             "project": "p", "zone": "europe-west1-b", "instance": "<VM name, default nodeName>",
 *             "nodeName": "<default hostname>", "networkInterface": "nic0",
 *             "computeEndpoint": "...", "auth": "metadata" | "none", "stateDir": "/var/lib/cni/gcp-ipam",
 *             "batchWindowMs": 25, "rateLimitBackoffMs": 500, "routes": [{"dst": "0.0.0.0/0"}] }
 */
import * as os from 'node:os';
import { ConfigError, ip as ipmath, type NetConf } from '@cnikit/netlib';

export interface IpamConfig {
  kubeconfig?: string;
  pool: string;
  project: string;
  zone: string;
  instance: string;
  nodeName: string;
  networkInterface: string;
  computeEndpoint?: string;
  networkConnectivityEndpoint?: string;
  auth: 'metadata' | 'none';
  metadataEndpoint?: string;
  stateDir: string;
  batchWindowMs: number;
  routes: { dst: string }[];
  operationTimeoutMs: number;
  rateLimitBackoffMs: number;
  logFile?: string;
}

const KNOWN = new Set([
  'type',
  'kubeconfig',
  'pool',
  'project',
  'zone',
  'instance',
  'nodeName',
  'networkInterface',
  'computeEndpoint',
  'networkConnectivityEndpoint',
  'auth',
  'metadataEndpoint',
  'stateDir',
  'batchWindowMs',
  'routes',
  'operationTimeoutMs',
  'rateLimitBackoffMs',
  'logFile',
]);
const NAME_RE = /^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$/;
const GCE_NAME_RE = /^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$/;

function str(o: Record<string, unknown>, k: string, required: boolean, re?: RegExp, expected = 'a non-empty string'): string | undefined {
  const v = o[k];
  if (v === undefined) {
    if (required) throw new ConfigError(`ipam.${k}`, expected, v);
    return undefined;
  }
  if (typeof v !== 'string' || v === '' || (re && !re.test(v))) throw new ConfigError(`ipam.${k}`, expected, v);
  return v;
}

export function parseIpamConfig(conf: NetConf): IpamConfig {
  const ipam = conf.ipam as Record<string, unknown> | undefined;
  if (!ipam || typeof ipam !== 'object') throw new ConfigError('ipam', 'an object with type "gcp-ipam"', ipam);
  for (const k of Object.keys(ipam)) if (!KNOWN.has(k)) throw new ConfigError(`ipam.${k}`, `one of ${[...KNOWN].join(', ')}`, ipam[k]);
  const nodeName = str(ipam, 'nodeName', false, NAME_RE, 'a DNS subdomain') ?? os.hostname().toLowerCase();
  const auth = ipam.auth ?? (ipam.computeEndpoint ? 'none' : 'metadata');
  if (auth !== 'metadata' && auth !== 'none') throw new ConfigError('ipam.auth', '"metadata" or "none"', auth);
  const num = (k: string, dflt: number, min: number, max: number): number => {
    const v = ipam[k] ?? dflt;
    if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max)
      throw new ConfigError(`ipam.${k}`, `an integer in [${min}, ${max}]`, v);
    return v;
  };
  let routes: { dst: string }[] = [{ dst: '0.0.0.0/0' }];
  if (ipam.routes !== undefined) {
    if (!Array.isArray(ipam.routes)) throw new ConfigError('ipam.routes', 'an array of {"dst": CIDR}', ipam.routes);
    routes = ipam.routes.map((r: unknown, i: number) => {
      const dst = (r as { dst?: unknown })?.dst;
      if (typeof dst !== 'string' || !ipmath.isValidCidr(dst)) throw new ConfigError(`ipam.routes[${i}].dst`, 'an IPv4 CIDR', dst);
      return { dst };
    });
  }
  const url = (k: string): string | undefined => {
    const v = str(ipam, k, false);
    if (v !== undefined && !/^https?:\/\/[^\s]+$/.test(v)) throw new ConfigError(`ipam.${k}`, 'an http(s) URL', v);
    return v;
  };
  return {
    kubeconfig: str(ipam, 'kubeconfig', false),
    pool: str(ipam, 'pool', true, NAME_RE, 'an IPPool name (DNS subdomain)')!,
    project: str(ipam, 'project', true, /^[a-z][-a-z0-9]{4,28}[a-z0-9]$/, 'a GCP project id')!,
    zone: str(ipam, 'zone', true, /^[a-z]+-[a-z]+[0-9]+-[a-z]$/, 'a GCP zone like europe-west1-b')!,
    instance: str(ipam, 'instance', false, GCE_NAME_RE, 'a GCE instance name') ?? nodeName.split('.')[0]!,
    nodeName,
    networkInterface: str(ipam, 'networkInterface', false, /^nic[0-9]+$/, 'nic0..nicN') ?? 'nic0',
    computeEndpoint: url('computeEndpoint'),
    networkConnectivityEndpoint: url('networkConnectivityEndpoint'),
    auth,
    metadataEndpoint: url('metadataEndpoint'),
    stateDir: str(ipam, 'stateDir', false) ?? '/var/lib/cni/gcp-ipam',
    batchWindowMs: num('batchWindowMs', 25, 0, 5000),
    routes,
    operationTimeoutMs: num('operationTimeoutMs', 120_000, 1000, 600_000),
    rateLimitBackoffMs: num('rateLimitBackoffMs', 500, 1, 60_000),
    logFile: str(ipam, 'logFile', false),
  };
}
