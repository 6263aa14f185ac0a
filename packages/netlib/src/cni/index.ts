/**
 * The CNI 1.1.0 protocol for plugins: pluginMain() dispatches a verb to a
 * handler; the rest parses and validates what the runtime sends (env, config,
 * prevResult, capability args), converts results between spec versions and
 * delegates to IPAM plugins.
 */
export {
  type CniCommand,
  type CniVersion,
  COMMANDS,
  CURRENT_VERSION,
  SUPPORTED_VERSIONS,
  assertVersionAllows,
  assertVersionSupported,
  compareVersions,
  isSupportedVersion,
  versionAllows,
} from './version';
export {
  type CniArgs,
  type CniEnv,
  type EnvSource,
  CONTAINER_ID_RE,
  formatCniArgs,
  ignoresUnknownArgs,
  knownCniArgs,
  parseCniArgs,
  parseEnv,
  requiredEnv,
  validateContainerId,
  validateIfName,
} from './env';
export {
  type Attachment,
  type DnsConf,
  type IpamConf,
  type NetConf,
  type ParseNetConfOptions,
  NETWORK_NAME_RE,
  parseNetConf,
  validAttachments,
} from './conf';
export {
  type CniDns,
  type CniInterface,
  type CniIpConfig,
  type CniRoute,
  type ParseResultOptions,
  type Result,
  convertResult,
  ipVersionOf,
  parseResult,
} from './result';
export { optionalPrevResultOf, prevResultOf } from './prev-result';
export {
  type BandwidthLimits,
  type DnsCapability,
  type IpRange,
  type PortMapping,
  type RuntimeConfig,
  runtimeConfigOf,
} from './capabilities';
export { CALL_LOG_DIR, type CallRecord, recordCall, takeCalls } from './calls';
export {
  type CmdArgs,
  type ErrorObject,
  type PluginHandlers,
  type PluginIo,
  type PluginOptions,
  type PluginOutput,
  lazyHandlers,
  pluginMain,
  runPlugin,
  toErrorObject,
} from './dispatch';
export {
  type DelegateArgs,
  type DelegateConf,
  type DelegateOptions,
  DEFAULT_DELEGATE_TIMEOUT_MS,
  delegateAdd,
  delegateCheck,
  delegateDel,
  delegateGc,
  delegateStatus,
  execDelegate,
  findPlugin,
} from './delegate';
