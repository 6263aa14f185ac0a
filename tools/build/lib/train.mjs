// Trained code caches for the CNI plugins (see runtime/program-chunk.ts for why).
//
// V8 writes into a code cache the bytecode of every function compiled so far in the
// process. Made right after compiling (Node's SEA `useCodeCache`, or a bare vm.Script),
// that is the top level only, and a call still compiles every function it runs. So the
// build runs each program through training calls in a trainer executable
// (runtime/trainer.ts: same pinned Node, same addons) and keeps the cache V8 writes when
// the call exits: one cache per CNI command (VERSION, ADD, DEL), since deserialising
// functions a call never runs costs time too. V8 checks a cache against its own version,
// flags and the source, and falls back to compiling when it does not match, so a cache
// can make a call slower or faster, never wrong.
//
// Every program gets a VERSION call. A program with a scenario in tools/build/training/<name>.mjs
// (ADD and DEL) also runs it; a scenario in throwaway network namespaces (all but those that
// export `needsKernel = false`) only when the build runs as root with Debian's reference
// plugins installed; otherwise the build says so and goes on.
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { pathToFileURL } from 'node:url';
import { addonTable } from './addons.mjs';
import { inject, writeBlob } from './blob.mjs';
import { bundleSource } from './bundle.mjs';
import { buildKey, record, upToDate } from './incremental.mjs';

const TRAINING_DIR = path.join(import.meta.dirname, '..', 'training');
export const GO_PLUGINS = '/usr/lib/cni';
/** Whether scenarios in network namespaces can run; part of the build key, so a build that could not is redone when it can. */
export const kernelTraining = () =>
  process.getuid?.() === 0 && ['macvlan', 'host-local'].every((p) => fs.existsSync(path.join(GO_PLUGINS, p)));

/** A program on the executable search path of the build (ip lives in /usr/sbin or /sbin). */
function which(cmd) {
  const dirs = [...(process.env.PATH ?? '').split(':'), '/usr/sbin', '/sbin', '/usr/bin', '/bin'].filter(Boolean);
  const hit = dirs.map((d) => path.join(d, cmd)).find((f) => fs.existsSync(f));
  if (!hit) throw new Error(`${cmd} not found`);
  return hit;
}

/**
 * @param {{ root: string, node: string, seaDir: string, runtime: () => string, runtimeId: string }} o
 *   seaDir: dist/.sea (shared by every output folder: the trainer is built once);
 *   runtime: the stripped Node every executable starts from (made on first use: slow).
 */
export function createTrainer(o) {
  let bin;
  const memo = new Map(); // source digest -> caches: the multi-call executable reuses the plugins' ones

  async function binary() {
    if (bin) return bin;
    const entry = path.join(import.meta.dirname, '..', 'runtime', 'trainer.ts');
    const b = await bundleSource(o.root, false, `require(${JSON.stringify(entry)});\n`);
    const work = fs.mkdtempSync(path.join(o.seaDir, 'trainer-'));
    try {
      const assets = {};
      const digests = [];
      for (const addon of addonTable(o.root)) {
        if (!fs.existsSync(addon.file)) continue; // a program needing it fails its scenario, and says so
        const bytes = fs.readFileSync(addon.file);
        const digest = createHash('sha256').update(bytes).digest('hex');
        const copy = path.join(work, `${addon.name}.node`);
        fs.writeFileSync(copy, bytes);
        fs.writeFileSync(`${copy}.sha256`, digest);
        assets[`addon/${addon.name}.node`] = copy;
        assets[`addon/${addon.name}.node.sha256`] = `${copy}.sha256`;
        digests.push(digest);
      }
      const out = path.join(o.seaDir, 'trainer');
      const key = buildKey([o.runtimeId, b.code, ...digests]);
      if (!upToDate(o.seaDir, 'trainer', out, key)) {
        fs.writeFileSync(path.join(work, 'bundle.js'), b.code);
        writeBlob(o.node, work, assets, false);
        inject(o.node, o.runtime(), path.join(work, 'sea.blob'), out);
        record(o.seaDir, 'trainer', out, key);
      }
      bin = out;
      return bin;
    } finally {
      fs.rmSync(work, { recursive: true, force: true });
    }
  }

  /**
   * Trains code caches for the source in `js`, one per CNI command the training ran: the
   * first call of a command starts from no cache, a later one from that command's cache, so
   * each holds what its own command runs and nothing else (lib/chunks.mjs embeds them; the
   * launcher picks the one of the call's CNI_COMMAND).
   * @returns {Promise<{ caches: Record<string, string>, how: string }>} command -> cache file
   */
  async function train(name, js) {
    const digest = createHash('sha256').update(fs.readFileSync(js)).digest('hex');
    const done = memo.get(digest);
    if (done) return done;
    const exe = await binary();
    const work = fs.mkdtempSync(path.join(path.dirname(js), `train-${name}-`));
    const caches = {};
    const calls = [];
    const t = {
      /** Unique prefix for namespace and link names of this training. */
      id: `cnt${process.pid.toString(36)}${name.replace(/[^a-z0-9]/g, '').slice(0, 4)}`,
      work,
      /** One call of the program under training; inside the named netns if given. Returns stdout. */
      call(env, input, netns) {
        const command = env.CNI_COMMAND ?? 'NONE';
        const cache = path.join(path.dirname(js), `program-${name}.${command}.cache`);
        const trainEnv = {
          ...env,
          CNIKIT_TRAIN_NAME: name,
          CNIKIT_TRAIN_SOURCE: js,
          CNIKIT_TRAIN_CACHE: cache,
          CNIKIT_CACHE_DIR: path.join(work, 'addons'),
        };
        try {
          return t.exec(exe, trainEnv, input, netns);
        } finally {
          // Written at exit even when the call failed: still a valid cache of what it ran.
          if (fs.existsSync(cache)) caches[command] = cache;
          calls.push(command);
        }
      },
      /** Runs another program (e.g. a reference plugin the scenario chains after). */
      exec(file, env, input, netns) {
        const [cmd, args] = netns ? [which('ip'), ['netns', 'exec', netns, file]] : [file, []];
        const r = spawnSync(cmd, args, { env, input, encoding: 'utf8', timeout: 60_000 });
        if (r.error) throw r.error;
        if (r.status !== 0)
          throw new Error(
            `${path.basename(file)} ${env.CNI_COMMAND ?? ''} exited ${r.status ?? r.signal}: ${(r.stdout + r.stderr).trim().slice(0, 500)}`,
          );
        return r.stdout;
      },
      ip(...args) {
        const r = spawnSync(which('ip'), args, { encoding: 'utf8' });
        if (r.status !== 0) throw new Error(`ip ${args.join(' ')}: ${r.stderr.trim()}`);
      },
      goPlugin: (p) => path.join(GO_PLUGINS, p),
    };
    let how;
    try {
      t.call({ CNI_COMMAND: 'VERSION', PATH: '/nonexistent' }, '{"cniVersion":"1.1.0"}');
      const scenario = path.join(TRAINING_DIR, `${name}.mjs`);
      let note = '';
      if (fs.existsSync(scenario)) {
        const mod = await import(pathToFileURL(scenario).href);
        // Scenarios in network namespaces chain after Debian's reference plugins, as a node does.
        if (mod.needsKernel !== false && !kernelTraining()) {
          note = ` (scenario skipped: needs root and ${GO_PLUGINS}/macvlan, host-local)`;
        } else {
          try {
            await mod.train(t);
          } catch (e) {
            // The caches of the calls that ran stay: still valid, only less complete.
            note = ` (scenario failed: ${e.message})`;
          }
        }
      }
      how = `code cache trained on ${calls.join(' ')}${note}`;
    } finally {
      fs.rmSync(work, { recursive: true, force: true });
    }
    const out = { caches, how };
    memo.set(digest, out);
    return out;
  }

  return { train };
}
