// Node side of the build: the SEA preparation blob from the pinned Node, then
// postject injects it into a copy of that same Node binary.
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import { createRequire } from 'node:module';
import * as path from 'node:path';

/** Node's SEA fuse: postject flips it so the binary looks for its blob at start. */
const FUSE = 'NODE_SEA_FUSE_fce680ab2cc467b6e072b8b5df1996b2';

function run(cmd, args, opts = {}) {
  const r = spawnSync(cmd, args, { encoding: 'utf8', maxBuffer: 64 << 20, ...opts });
  if (r.error) throw r.error;
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(' ')} failed (${r.status ?? r.signal}):\n${r.stderr}${r.stdout}`);
  return r;
}

/** Lines of the blob step's stderr worth showing (drops Node's fixed notices). */
function noteworthy(stderr) {
  return stderr
    .split('\n')
    .filter(
      (l) =>
        l.trim() !== '' && !/ExperimentalWarning: Single executable|Wrote single executable|--trace-warnings|is redundant when/.test(l),
    );
}

/**
 * Writes `<workDir>/sea.blob` from `<workDir>/bundle.js`. With `snapshot`, Node runs the
 * bundle now to build the startup snapshot (the launcher's warm-up); otherwise the blob
 * holds the script and V8's code cache for it.
 * @returns {string[]} warnings printed by the step
 */
export function writeBlob(node, workDir, assets, snapshot) {
  const config = {
    main: 'bundle.js',
    output: 'sea.blob',
    disableExperimentalSEAWarning: true,
    useSnapshot: snapshot,
    useCodeCache: !snapshot, // Node ignores (and warns about) the code cache of a snapshot
    assets,
  };
  fs.writeFileSync(path.join(workDir, 'sea-config.json'), JSON.stringify(config, null, 2));
  // A small fixed environment: whatever a module reads while the snapshot is built is frozen.
  const env = { PATH: '/usr/sbin:/usr/bin:/sbin:/bin', LANG: 'C.UTF-8' };
  const r = run(node, ['--experimental-sea-config', 'sea-config.json'], { cwd: workDir, env });
  return noteworthy(r.stderr);
}

/**
 * The runtime every executable starts from: the pinned Node, with its symbol and debug
 * sections stripped (18 MB of 127; .dynsym, which addons link against, stays). Kept in
 * cacheDir, one per Node binary (older ones are removed), since stripping takes a while.
 */
export function baseRuntime(node, cacheDir, strip) {
  if (!strip) return node;
  const st = fs.statSync(node);
  const name = `node-${st.size}-${Math.trunc(st.mtimeMs)}.stripped`;
  const base = path.join(cacheDir, name);
  if (!fs.existsSync(base)) {
    const tmp = `${base}.${process.pid}.tmp`;
    run('strip', ['--strip-all', '-o', tmp, node]);
    fs.renameSync(tmp, base);
    for (const old of fs.readdirSync(cacheDir).filter((f) => /^node-.*\.stripped$/.test(f) && f !== name)) {
      fs.rmSync(path.join(cacheDir, old), { force: true }); // a build still copying it keeps its open file
    }
  }
  return base;
}

/** Copies the runtime to `out` with the blob injected; atomic replace, so a running copy is never rewritten. */
export function inject(node, runtime, blob, out) {
  const postject = path.join(path.dirname(createRequire(import.meta.url).resolve('postject')), 'cli.js');
  // Hidden name: whoever lists the output folder meanwhile must not take it for an executable.
  const tmp = path.join(path.dirname(out), `.${path.basename(out)}.${process.pid}.tmp`);
  fs.copyFileSync(runtime, tmp);
  try {
    run(node, [postject, tmp, 'NODE_SEA_BLOB', blob, '--sentinel-fuse', FUSE]);
    fs.chmodSync(tmp, 0o755);
    fs.renameSync(tmp, out);
  } finally {
    fs.rmSync(tmp, { force: true });
  }
}
