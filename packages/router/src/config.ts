/**
 * The router plugin's configuration: the meta-plugin fields shared with veth,
 * plus overlay_interface, host_rule_table and sriov. Parsed once per call;
 * every bad value is a code-7 error naming the field, the expected form and
 * the value received. A snake_case key we do not know (a typo such as
 * "overlay_interfaces") is code 2: it would otherwise silently become a
 * default. camelCase and dotted keys are left alone, because runtimes inject
 * their own (runtimeConfig, cni.dev/valid-attachments, ...).
 */
import { CniCode, CniError, ConfigError, prevResultOf, type NetConf, type Result } from '@cnikit/netlib';
import { META_FIELDS, lenient, parseBool, parseInteger, parseMetaConfig, type ConfigWarnings, type MetaConfig } from '@cnikit/meta';

export interface RouterConfig extends MetaConfig {
  netName: string;
  cniVersion: string;
  /** The pod's NIC from the overlay CNI (calico, cilium, flannel...); east-west traffic leaves through it. */
  overlayInterface: string;
  /** Host table holding the routes to chained IPs that sit inside one of the host's own subnets. */
  hostRuleTable: number;
  /** The chained NIC is an SR-IOV VF: no static neighbour entries. */
  sriov: boolean;
  /** The previous plugin's result; undefined only where the verb allows it (DEL, GC, STATUS). */
  prevResult?: Result;
}

export const ROUTER_FIELDS = ['overlay_interface', 'host_rule_table', 'sriov'] as const;

/** Tables the kernel reserves: default (253), main (254), local (255). 0 means "unspecified". */
const RESERVED_TABLES = [253, 254, 255];
const MAX_TABLE = 2 ** 32 - 1;

/** An interface name the kernel accepts: 1-15 bytes, not "." or "..", no "/", ":" or whitespace. */
export function isInterfaceName(v: unknown): v is string {
  return typeof v === 'string' && v !== '' && Buffer.byteLength(v) <= 15 && v !== '.' && v !== '..' && !/[/:\s]/u.test(v);
}

function parseOverlayInterface(raw: Record<string, unknown>): string {
  const v = raw['overlay_interface'];
  if (v === undefined) return 'eth0';
  if (!isInterfaceName(v))
    throw new ConfigError('overlay_interface', 'an interface name of 1-15 characters without "/", ":" or spaces, such as "eth0"', v);
  return v;
}

function parseHostRuleTable(raw: Record<string, unknown>): number {
  const t = parseInteger(raw, 'host_rule_table', 500, 1, MAX_TABLE);
  if (RESERVED_TABLES.includes(t)) {
    throw new ConfigError('host_rule_table', `a table id from 1 to ${MAX_TABLE} other than 253 (default), 254 (main) and 255 (local)`, t);
  }
  return t;
}

const KNOWN = new Set<string>([...META_FIELDS, ...ROUTER_FIELDS]);

/** Snake-case keys that are not ours: almost certainly a misspelt router field. */
function rejectUnknownSnakeCase(raw: Record<string, unknown>): void {
  for (const key of Object.keys(raw)) {
    if (/^[a-z0-9]+(_[a-z0-9]+)+$/.test(key) && !KNOWN.has(key)) {
      throw new CniError(
        CniCode.UnsupportedField,
        `unsupported field "${key}"`,
        `router does not know "${key}" (value ${JSON.stringify(raw[key])}); its fields are ${[...META_FIELDS, ...ROUTER_FIELDS].join(', ')}`,
      );
    }
  }
}

/**
 * Parses the plugin config. `needPrev` is true for ADD and CHECK, whose
 * prevResult (the chained interface's result) is required. With `warnings`
 * (DEL), bad fields are recorded there and left at their defaults (see
 * ConfigWarnings in @cnikit/meta).
 */
export function parseConfig(conf: NetConf, needPrev: boolean, warnings?: ConfigWarnings): RouterConfig {
  const raw = conf as unknown as Record<string, unknown>;
  lenient(
    warnings,
    () => rejectUnknownSnakeCase(raw),
    () => undefined,
  );
  const meta = parseMetaConfig(raw, 'router', warnings);
  const field = <T>(parse: () => T, fallback: () => T): T => lenient(warnings, parse, fallback);
  const cfg: RouterConfig = {
    ...meta,
    netName: conf.name,
    cniVersion: conf.cniVersion,
    overlayInterface: field(
      () => parseOverlayInterface(raw),
      () => parseOverlayInterface({}),
    ),
    hostRuleTable: field(
      () => parseHostRuleTable(raw),
      () => parseHostRuleTable({}),
    ),
    sriov: field(
      () => parseBool(raw, 'sriov', false),
      () => false,
    ),
  };
  if (needPrev) cfg.prevResult = prevResultOf(conf);
  else if (conf.prevResult !== undefined && conf.prevResult !== null) {
    const prev = field(
      () => prevResultOf(conf),
      () => undefined,
    );
    if (prev) cfg.prevResult = prev;
  }
  return cfg;
}
