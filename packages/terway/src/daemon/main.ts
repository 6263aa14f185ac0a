/**
 * terwayd: the Terway node daemon (ENI multi-IP pool, gRPC TerwayBackend on
 * /var/run/eni/eni.socket). See docs/terway.md.
 */
import * as fs from 'node:fs';
import { Command } from 'commander';
import { connect } from '@cnikit/kube';
import { createLogger } from '@cnikit/netlib';
import { kubePodSource } from './kube-pods';
import { loadEniConfigMap, writeCniConf } from './eni-config';
import { DEFAULT_SOCKET } from '../rpc/proto';
import { startTerwayd, startVpcRouteTerwayd } from './bootstrap';

const cmd = new Command('terwayd')
  .description('Terway node daemon: ENI multi-IP resource pool and the TerwayBackend gRPC service')
  .option('--config <file>', 'eni-config eni_conf JSON (the ConfigMap key mounted as a file)', '/etc/eni/eni.json')
  .option('--configmap <namespace/name>', 'read eni_conf (and 10-terway.conf) from this ConfigMap instead of --config, e.g. kube-system/eni-config')
  .option('--cni-conf-dir <dir>', 'write the ConfigMap\'s 10-terway.conf there (e.g. /etc/cni/net.d)')
  .option('--socket <path>', 'gRPC UNIX socket', DEFAULT_SOCKET)
  .option('--state <file>', 'local lease state', '/var/lib/cni/terway/pod.json')
  .option('--metadata <url>', 'instance metadata service', 'http://100.100.100.200')
  .option('--ecs-endpoint <host:port>', 'ECS OpenAPI endpoint (default: the regional one)')
  .option('--vpc-endpoint <host:port>', 'VPC OpenAPI endpoint (default: the regional one)')
  .option('--protocol <p>', 'http or https', 'https')
  .option('--kubeconfig <file>', 'kubeconfig for pod annotations and StatefulSet ownership (in-cluster config when KUBERNETES_SERVICE_HOST is set)')
  .option('--device-plugin-dir <dir>', 'register aliyun/eni with the kubelet there (e.g. /var/lib/kubelet/device-plugins)')
  .option('--daemon-mode <mode>', 'ENIMultiIP (secondary IPs from the pool), ENIOnly (a whole ENI per pod) or VPC (VPC route: addresses of the node\'s pod CIDR)', 'ENIMultiIP')
  .option('--pod-cidr <cidr>', 'VPC mode: the node\'s pod CIDR (its spec.podCIDR)')
  .option('--gc-interval <seconds>', 'GC period of leaked IPs', '300')
  .option('--log-file <file>', 'JSON-lines log file', '/var/log/terway/terwayd.log')
  .option('--log-level <level>', 'debug, info, warn, error or off', 'info');

async function main(): Promise<void> {
  cmd.parse(process.argv);
  const o = cmd.opts<Record<string, string>>();
  const log = createLogger({ file: o['logFile']!, level: o['logLevel'] as 'info', module: 'terwayd' });
  if (o['daemonMode'] !== 'ENIMultiIP' && o['daemonMode'] !== 'ENIOnly' && o['daemonMode'] !== 'VPC') throw new Error(`--daemon-mode: expected ENIMultiIP, ENIOnly or VPC, got "${o['daemonMode']}"`);
  if (o['daemonMode'] === 'VPC' && !o['podCidr']) throw new Error('--daemon-mode VPC needs --pod-cidr (the node\'s spec.podCIDR)');
  const useKube = Boolean(o['kubeconfig']) || Boolean(process.env['KUBERNETES_SERVICE_HOST']);
  const transport = useKube || o['configmap'] ? connect(o['kubeconfig'] ? { kubeconfig: o['kubeconfig'] } : {}) : undefined;
  let eniConf: Record<string, unknown>;
  if (o['configmap'] && transport) {
    const [ns, name] = o['configmap'].includes('/') ? o['configmap'].split('/', 2) : ['kube-system', o['configmap']];
    const cm = await loadEniConfigMap(transport, ns, name);
    eniConf = cm.eniConf;
    if (o['cniConfDir'] && cm.cniConf) writeCniConf(o['cniConfDir'], cm.cniConf);
  } else {
    // VPC route mode needs no cloud: the eni_conf file is optional there (service_cidr only).
    eniConf = o['daemonMode'] === 'VPC' && !fs.existsSync(o['config']!) ? {} : (JSON.parse(fs.readFileSync(o['config']!, 'utf8')) as Record<string, unknown>);
  }
  const pods = transport ? kubePodSource(transport) : undefined;
  if (o['daemonMode'] === 'VPC') {
    const v = await startVpcRouteTerwayd({
      ...(pods ? { pods } : {}),
      socket: o['socket']!,
      stateFile: o['state']!,
      podCidr: o['podCidr']!,
      ...(typeof eniConf['service_cidr'] === 'string' ? { serviceCidr: eniConf['service_cidr'] } : {}),
      gcIntervalMs: Number(o['gcInterval']) * 1000,
      log: (msg, fields) => log.info(msg, fields),
    });
    process.stderr.write(`terwayd: VPC route mode (${o['podCidr']}), listening on ${o['socket']}\n`);
    const stopV = (): void => {
      void v.stop().finally(() => process.exit(0));
    };
    process.on('SIGTERM', stopV);
    process.on('SIGINT', stopV);
    return;
  }
  const d = await startTerwayd({
    ...(pods ? { pods } : {}),
    eniConf,
    socket: o['socket']!,
    stateFile: o['state']!,
    metadataUrl: o['metadata']!,
    ...(o['ecsEndpoint'] ? { ecsEndpoint: o['ecsEndpoint'] } : {}),
    ...(o['vpcEndpoint'] ? { vpcEndpoint: o['vpcEndpoint'] } : {}),
    protocol: o['protocol'] === 'http' ? 'http' : 'https',
    gcIntervalMs: Number(o['gcInterval']) * 1000,
    mode: o['daemonMode'] === 'ENIOnly' ? 'ENIOnly' : 'ENIMultiIP',
    ...(o['devicePluginDir'] ? { devicePluginDir: o['devicePluginDir'] } : {}),
    log: (msg, fields) => log.info(msg, fields),
  });
  process.stderr.write(`terwayd: listening on ${o['socket']}\n`);
  const stop = (): void => {
    void d.stop().finally(() => process.exit(0));
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

main().catch((e: unknown) => {
  process.stderr.write(`terwayd: ${e instanceof Error ? e.message : String(e)}\n`);
  process.exit(1);
});
