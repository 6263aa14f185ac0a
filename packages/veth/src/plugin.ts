/**
 * The veth plugin's CNI verbs: parse the config once, open the pod's netns,
 * hand over to setup/teardown/check, close the netns.
 */
import { CniCode, CniError, openNetns, openNetnsIfPresent, validAttachments, type CmdArgs, type Result } from '@cnikit/netlib';
import { checkVeth } from './check';
import { parseConfig } from './config';
import { openLog } from '@cnikit/meta';
import { addVeth } from './setup';
import { delVeth, gcVeth } from './teardown';

export async function add(args: CmdArgs): Promise<Result> {
  const cfg = parseConfig(args.conf, true);
  if (cfg.skipCall) return cfg.prevResult!;
  const log = openLog(cfg.logOptions, 'veth', args.containerId, args.ifName);
  const podNs = openNetns(args.netns);
  try {
    log('ADD', { netns: args.netns });
    const res = await addVeth(cfg, { containerId: args.containerId, ifName: args.ifName, netnsPath: args.netns, podNs, log });
    log('ADD done', { interfaces: res.interfaces?.map((i) => i.name) });
    return res;
  } catch (e) {
    log('ADD failed', { error: e instanceof Error ? e.message : String(e) });
    throw e;
  } finally {
    podNs.close();
  }
}

export async function del(args: CmdArgs): Promise<void> {
  const warnings: string[] = [];
  const cfg = parseConfig(args.conf, false, warnings);
  if (cfg.skipCall) return;
  const log = openLog(cfg.logOptions, 'veth', args.containerId, args.ifName);
  for (const w of warnings) log('DEL: config field ignored', { warning: w }, 'warn');
  const podNs = openNetnsIfPresent(args.netns);
  try {
    log('DEL', { netns: args.netns, netnsPresent: podNs !== undefined });
    await delVeth({ containerId: args.containerId, ifName: args.ifName, podNs, prev: cfg.prevResult, log });
  } finally {
    podNs?.close();
  }
}

export async function check(args: CmdArgs): Promise<void> {
  const cfg = parseConfig(args.conf, true);
  if (cfg.skipCall) return;
  const podNs = openNetns(args.netns);
  try {
    await checkVeth(cfg, args.containerId, args.ifName, podNs);
  } finally {
    podNs.close();
  }
}

export async function gc(args: CmdArgs): Promise<void> {
  const cfg = parseConfig(args.conf, false);
  const errors = await gcVeth(cfg.netName, validAttachments(args.conf));
  if (errors.length > 0) throw new CniError(CniCode.Internal, 'veth GC left links behind', errors.join('; '));
}

/** veth needs no daemon or pool: it can serve ADD whenever its config parses. */
export async function status(args: CmdArgs): Promise<void> {
  parseConfig(args.conf, false);
}
