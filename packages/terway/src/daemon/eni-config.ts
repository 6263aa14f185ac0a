/**
 * The `eni-config` ConfigMap of Terway (kube-system): `eni_conf` (terwayd's
 * pool and cloud settings, JSON) and `10-terway.conf` (the CNI network config
 * the node's /etc/cni/net.d gets). Parsed and validated once; errors name the key.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { ConfigMaps, clientFor, type KubeTransport } from '@cnikit/kube';
import { ConfigError } from '@cnikit/netlib';
import { parsePoolConfig } from '../pool';

export const CNI_CONF_KEY = '10-terway.conf';

export interface EniConfigMap {
  eniConf: Record<string, unknown>;
  /** The CNI config text, when the ConfigMap has one. */
  cniConf?: string;
}

export function parseEniConfigData(data: Record<string, string> | undefined): EniConfigMap {
  const raw = data?.['eni_conf'];
  if (raw === undefined) throw new ConfigError('eni-config.data.eni_conf', 'a JSON object', raw);
  let eniConf: unknown;
  try {
    eniConf = JSON.parse(raw);
  } catch {
    throw new ConfigError('eni-config.data.eni_conf', 'a JSON object', raw.slice(0, 80));
  }
  parsePoolConfig(eniConf); // validates the pool keys now, not at the first pod
  const cni = data?.[CNI_CONF_KEY];
  if (cni !== undefined) {
    let c: unknown;
    try {
      c = JSON.parse(cni);
    } catch {
      throw new ConfigError(`eni-config.data.${CNI_CONF_KEY}`, 'a CNI network config (JSON)', cni.slice(0, 80));
    }
    const o = c as Record<string, unknown>;
    if (
      typeof o !== 'object' ||
      o === null ||
      o['type'] !== 'terway' ||
      typeof o['cniVersion'] !== 'string' ||
      typeof o['name'] !== 'string'
    ) {
      throw new ConfigError(`eni-config.data.${CNI_CONF_KEY}`, 'a CNI config with cniVersion, name and type "terway"', cni.slice(0, 80));
    }
  }
  return { eniConf: eniConf as Record<string, unknown>, ...(cni !== undefined ? { cniConf: cni } : {}) };
}

export async function loadEniConfigMap(transport: KubeTransport, namespace = 'kube-system', name = 'eni-config'): Promise<EniConfigMap> {
  const cm = await clientFor(transport, ConfigMaps).get(name, { namespace });
  return parseEniConfigData((cm as { data?: Record<string, string> }).data);
}

/** Writes the CNI config into the node's CNI config dir (temp file + rename). */
export function writeCniConf(dir: string, text: string): string {
  fs.mkdirSync(dir, { recursive: true });
  const file = path.join(dir, CNI_CONF_KEY);
  const tmp = `${file}.tmp`;
  fs.writeFileSync(tmp, text.endsWith('\n') ? text : `${text}\n`, { mode: 0o644 });
  fs.renameSync(tmp, file);
  return file;
}
