/**
 * terwayd: the Terway node daemon (ENI multi-IP pool, gRPC TerwayBackend on
 * /var/run/eni/eni.socket). See docs/terway.md.
 */
import * as fs from 'node:fs';
import { Command } from 'commander';
import { createLogger } from '@cnikit/netlib';
import { DEFAULT_SOCKET } from '../rpc/proto';
import { startTerwayd } from './bootstrap';

const cmd = new Command('terwayd')
  .description('Terway node daemon: ENI multi-IP resource pool and the TerwayBackend gRPC service')
  .option('--config <file>', 'eni-config eni_conf JSON (the ConfigMap key mounted as a file)', '/etc/eni/eni.json')
  .option('--socket <path>', 'gRPC UNIX socket', DEFAULT_SOCKET)
  .option('--state <file>', 'local lease state', '/var/lib/cni/terway/pod.json')
  .option('--metadata <url>', 'instance metadata service', 'http://100.100.100.200')
  .option('--ecs-endpoint <host:port>', 'ECS OpenAPI endpoint (default: the regional one)')
  .option('--vpc-endpoint <host:port>', 'VPC OpenAPI endpoint (default: the regional one)')
  .option('--protocol <p>', 'http or https', 'https')
  .option('--gc-interval <seconds>', 'GC period of leaked IPs', '300')
  .option('--log-file <file>', 'JSON-lines log file', '/var/log/terway/terwayd.log')
  .option('--log-level <level>', 'debug, info, warn, error or off', 'info');

async function main(): Promise<void> {
  cmd.parse(process.argv);
  const o = cmd.opts<Record<string, string>>();
  const log = createLogger({ file: o['logFile']!, level: o['logLevel'] as 'info', module: 'terwayd' });
  const eniConf = JSON.parse(fs.readFileSync(o['config']!, 'utf8')) as Record<string, unknown>;
  const d = await startTerwayd({
    eniConf,
    socket: o['socket']!,
    stateFile: o['state']!,
    metadataUrl: o['metadata']!,
    ...(o['ecsEndpoint'] ? { ecsEndpoint: o['ecsEndpoint'] } : {}),
    ...(o['vpcEndpoint'] ? { vpcEndpoint: o['vpcEndpoint'] } : {}),
    protocol: o['protocol'] === 'http' ? 'http' : 'https',
    gcIntervalMs: Number(o['gcInterval']) * 1000,
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
