/**
 * The router plugin's CNI verbs: parse the config once, open the pod's netns,
 * hand over to setup/teardown/check, close the netns. The node's namespace is
 * passed in explicitly (the process's own in the binary, a test namespace in
 * the in-process tests).
 */
import {
  CniCode,
  CniError,
  hostNetns,
  openNetns,
  openNetnsIfPresent,
  validAttachments,
  type CmdArgs,
  type Netns,
  type PluginHandlers,
  type Result,
} from '@cnikit/netlib';
import { openLog } from '@cnikit/meta';
import { checkRouter } from './check';
import { parseConfig } from './config';
import { addRouter } from './setup';
import { delRouter, gcRouter } from './teardown';

/** The verbs, bound to a way of getting the node's netns. */
export function routerHandlers(host: () => Netns = hostNetns): Required<PluginHandlers> {
  return {
    async add(args: CmdArgs): Promise<Result> {
      const cfg = parseConfig(args.conf, true);
      if (cfg.skipCall) return { ...cfg.prevResult!, cniVersion: cfg.cniVersion };
      const log = openLog(cfg.logOptions, 'router', args.containerId, args.ifName);
      const podNs = openNetns(args.netns);
      try {
        log('ADD', { netns: args.netns, network: cfg.netName });
        const res = await addRouter(cfg, {
          containerId: args.containerId,
          ifName: args.ifName,
          netnsPath: args.netns,
          podNs,
          hostNs: host(),
          log,
        });
        log('ADD done');
        return res;
      } catch (e) {
        log('ADD failed', { error: e });
        throw e;
      } finally {
        podNs.close();
      }
    },

    async del(args: CmdArgs): Promise<void> {
      const warnings: string[] = [];
      const cfg = parseConfig(args.conf, false, warnings);
      if (cfg.skipCall) return;
      const log = openLog(cfg.logOptions, 'router', args.containerId, args.ifName);
      for (const w of warnings) log('DEL: config field ignored', { warning: w }, 'warn');
      const podNs = openNetnsIfPresent(args.netns);
      try {
        log('DEL', { netns: args.netns, netnsPresent: podNs !== undefined, prevResult: cfg.prevResult !== undefined });
        await delRouter({
          netName: cfg.netName,
          overlayInterface: cfg.overlayInterface,
          containerId: args.containerId,
          ifName: args.ifName,
          hostNs: host(),
          podNs,
          prev: cfg.prevResult,
          log,
        });
      } catch (e) {
        log('DEL failed', { error: e });
        throw e;
      } finally {
        podNs?.close();
      }
    },

    async check(args: CmdArgs): Promise<void> {
      const cfg = parseConfig(args.conf, true);
      if (cfg.skipCall) return;
      const podNs = openNetns(args.netns);
      try {
        await checkRouter(cfg, host(), podNs, args.containerId, args.ifName, args.netns);
      } finally {
        podNs.close();
      }
    },

    async gc(args: CmdArgs): Promise<void> {
      const cfg = parseConfig(args.conf, false);
      const log = openLog(cfg.logOptions, 'router', '', '');
      const errors = await gcRouter(host(), cfg.netName, cfg.hostRuleTable, validAttachments(args.conf), log);
      if (errors.length > 0) throw new CniError(CniCode.Internal, 'router GC left objects behind', errors.join('; '));
    },

    /** router needs no daemon or pool: it can serve ADD whenever its config parses. */
    async status(args: CmdArgs): Promise<void> {
      parseConfig(args.conf, false);
    },
  };
}

export const { add, del, check, gc, status } = routerHandlers();
