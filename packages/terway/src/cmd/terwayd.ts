/**
 * terwayd: the Terway node daemon (ENI multi-IP pool, gRPC TerwayBackend on
 * /var/run/eni/eni.socket). See docs/terway.md.
 */
import * as fs from 'node:fs';
import { Command } from 'commander';
import { connect, type KubeTransport } from '@cnikit/kube';
import { createLogger } from '@cnikit/netlib';
import { kubePodSource } from '../daemon/kube-pods';
import { loadEniConfigMap, writeCniConf } from '../daemon/eni-config';
import { DEFAULT_SOCKET } from '../rpc/proto';
import { METADATA_URL } from '../cloud/metadata';
import { startTerwayd, startVpcRouteTerwayd } from '../daemon/bootstrap';
import { nodePodCidr } from '../daemon/node-cidr';

const cmd = new Command('terwayd')
  .description('Terway node daemon: ENI multi-IP resource pool and the TerwayBackend gRPC service')
  .option('--config <file>', 'eni-config eni_conf JSON (the ConfigMap key mounted as a file)', '/etc/eni/eni.json')
  .option(
    '--configmap <namespace/name>',
    'read eni_conf (and 10-terway.conf) from this ConfigMap instead of --config, e.g. kube-system/eni-config',
  )
  .option('--cni-conf-dir <dir>', "write the ConfigMap's 10-terway.conf there (e.g. /etc/cni/net.d)")
  .option('--socket <path>', 'gRPC UNIX socket', DEFAULT_SOCKET)
  .option('--state <file>', 'local lease state', '/var/lib/cni/terway/pod.json')
  .option('--metadata <url>', 'instance metadata service', METADATA_URL)
  .option('--ecs-endpoint <host:port>', 'ECS OpenAPI endpoint (default: the regional one)')
  .option('--vpc-endpoint <host:port>', 'VPC OpenAPI endpoint (default: the regional one)')
  .option('--protocol <p>', 'http or https', 'https')
  .option(
    '--kubeconfig <file>',
    'kubeconfig for pod annotations and StatefulSet ownership (in-cluster config when KUBERNETES_SERVICE_HOST is set)',
  )
  .option('--device-plugin-dir <dir>', 'register aliyun/eni with the kubelet there (e.g. /var/lib/kubelet/device-plugins)')
  .option(
    '--daemon-mode <mode>',
    "ENIMultiIP (secondary IPs from the pool), ENIOnly (a whole ENI per pod) or VPC (VPC route: addresses of the node's pod CIDR)",
    'ENIMultiIP',
  )
  .option(
    '--pod-cidr <cidr>',
    "VPC mode: the node's pod CIDR (default: spec.podCIDR(s) of the Node object, with --node-name / $NODE_NAME and API access)",
  )
  .option('--node-name <name>', "this node's Node object (default $NODE_NAME)")
  .option('--metrics-address <host:port>', 'serve Prometheus metrics (/metrics) there, e.g. 127.0.0.1:9190')
  .option('--gc-interval <seconds>', 'GC period of leaked IPs', '300')
  .option('--log-file <file>', 'JSON-lines log file', '/var/log/terway/terwayd.log')
  .option('--log-level <level>', 'debug, info, warn, error or off', 'info');

type Opts = Record<string, string>;
type Log = (msg: string, fields?: Record<string, unknown>) => void;

/** The flags that depend on each other; an error names what is missing. */
function checkFlags(o: Opts, useKube: boolean, nodeName: string | undefined): void {
  if (o['daemonMode'] !== 'ENIMultiIP' && o['daemonMode'] !== 'ENIOnly' && o['daemonMode'] !== 'VPC')
    throw new Error(`--daemon-mode: expected ENIMultiIP, ENIOnly or VPC, got "${o['daemonMode']}"`);
  if (o['daemonMode'] === 'VPC' && !o['podCidr'] && !(useKube && nodeName))
    throw new Error(
      "--daemon-mode VPC needs --pod-cidr, or --node-name (or $NODE_NAME) with --kubeconfig / in-cluster access to read the Node's spec.podCIDR",
    );
}

interface EniSettings {
  eniConf: Record<string, unknown>;
  configMap?: { namespace: string; name: string; cniConf?: string };
}

/** eni_conf from the ConfigMap (writing its 10-terway.conf when asked) or from the mounted file. */
async function loadEniSettings(o: Opts, transport: KubeTransport | undefined): Promise<EniSettings> {
  if (o['configmap'] && transport) {
    const [ns, name] = o['configmap'].includes('/') ? o['configmap'].split('/', 2) : ['kube-system', o['configmap']];
    const cm = await loadEniConfigMap(transport, ns!, name!);
    if (o['cniConfDir'] && cm.cniConf) writeCniConf(o['cniConfDir'], cm.cniConf);
    return { eniConf: cm.eniConf, configMap: { namespace: ns!, name: name!, ...(cm.cniConf ? { cniConf: cm.cniConf } : {}) } };
  }
  // VPC route mode needs no cloud: the eni_conf file is optional there (service_cidr only).
  if (o['daemonMode'] === 'VPC' && !fs.existsSync(o['config']!)) return { eniConf: {} };
  return { eniConf: JSON.parse(fs.readFileSync(o['config']!, 'utf8')) as Record<string, unknown> };
}

/** Stops the daemon and exits on SIGTERM or SIGINT. */
function stopOnSignals(d: { stop(): Promise<void> }): void {
  const stop = (): void => {
    void d.stop().finally(() => process.exit(0));
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

async function runVpcRoute(
  o: Opts,
  settings: EniSettings,
  transport: KubeTransport | undefined,
  nodeName: string | undefined,
  log: Log,
): Promise<void> {
  const pods = transport ? kubePodSource(transport) : undefined;
  const podCidr = o['podCidr'] ?? (await nodePodCidr(transport!, nodeName!));
  const serviceCidr = settings.eniConf['service_cidr'];
  const v = await startVpcRouteTerwayd({
    ...(pods ? { pods } : {}),
    socket: o['socket']!,
    stateFile: o['state']!,
    podCidr,
    ...(typeof serviceCidr === 'string' ? { serviceCidr } : {}),
    gcIntervalMs: Number(o['gcInterval']) * 1000,
    log,
  });
  process.stderr.write(`terwayd: VPC route mode (${podCidr}), listening on ${o['socket']}\n`);
  stopOnSignals(v);
}

async function runEni(o: Opts, settings: EniSettings, transport: KubeTransport | undefined, log: Log): Promise<void> {
  const pods = transport ? kubePodSource(transport) : undefined;
  const { configMap } = settings;
  const d = await startTerwayd({
    ...(pods ? { pods } : {}),
    eniConf: settings.eniConf,
    socket: o['socket']!,
    stateFile: o['state']!,
    // empty (a manifest's unset ConfigMap key) is the default, as for the endpoints
    metadataUrl: o['metadata'] || METADATA_URL,
    ...(o['ecsEndpoint'] ? { ecsEndpoint: o['ecsEndpoint'] } : {}),
    ...(o['vpcEndpoint'] ? { vpcEndpoint: o['vpcEndpoint'] } : {}),
    protocol: o['protocol'] === 'http' ? 'http' : 'https',
    gcIntervalMs: Number(o['gcInterval']) * 1000,
    mode: o['daemonMode'] === 'ENIOnly' ? 'ENIOnly' : 'ENIMultiIP',
    ...(o['devicePluginDir'] ? { devicePluginDir: o['devicePluginDir'] } : {}),
    ...(o['metricsAddress'] ? { metricsAddress: o['metricsAddress'] } : {}),
    // With --configmap, changes of the ConfigMap are applied live (see eni-config-watch.ts).
    ...(configMap && transport
      ? {
          configMap: {
            transport,
            namespace: configMap.namespace,
            name: configMap.name,
            ...(o['cniConfDir'] ? { cniConfDir: o['cniConfDir'] } : {}),
            ...(configMap.cniConf ? { initialCniConf: configMap.cniConf } : {}),
          },
        }
      : {}),
    log,
  });
  process.stderr.write(`terwayd: listening on ${o['socket']}${d.metricsServer ? `, metrics on ${d.metricsServer.url}/metrics` : ''}\n`);
  stopOnSignals(d);
}

async function main(): Promise<void> {
  cmd.parse(process.argv);
  const o = cmd.opts<Opts>();
  const logger = createLogger({ file: o['logFile']!, level: o['logLevel'] as 'info', module: 'terwayd' });
  const log: Log = (msg, fields) => logger.info(msg, fields);
  const useKube = Boolean(o['kubeconfig']) || Boolean(process.env['KUBERNETES_SERVICE_HOST']);
  const nodeName = o['nodeName'] ?? process.env['NODE_NAME'];
  checkFlags(o, useKube, nodeName);
  const transport = useKube || o['configmap'] ? connect(o['kubeconfig'] ? { kubeconfig: o['kubeconfig'] } : {}) : undefined;
  const settings = await loadEniSettings(o, transport);
  if (o['daemonMode'] === 'VPC') await runVpcRoute(o, settings, transport, nodeName, log);
  else await runEni(o, settings, transport, log);
}

main().catch((e: unknown) => {
  process.stderr.write(`terwayd: ${e instanceof Error ? e.message : String(e)}\n`);
  process.exit(1);
});
