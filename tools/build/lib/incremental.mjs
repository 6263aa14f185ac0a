// Skips the slow SEA steps (snapshot build, copy of a 100 MB runtime, injection)
// when nothing that goes into an executable changed since it was last written.
import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';

/** Everything an executable is made of, as one digest. */
export function buildKey(parts) {
  const h = createHash('sha256');
  for (const p of parts) h.update(String(p)).update('\0');
  return h.digest('hex');
}

/** The build tooling's own sources: a change to how executables are made rebuilds them all. */
export function toolingDigest(buildDir) {
  const files = [];
  const walk = (d) => {
    for (const e of fs.readdirSync(d, { withFileTypes: true })) {
      const p = path.join(d, e.name);
      if (e.isDirectory()) {
        if (e.name !== 'fixtures' && e.name !== 'test') walk(p);
      } else if (/\.(mjs|ts)$/.test(e.name)) files.push(p);
    }
  };
  walk(buildDir);
  return buildKey(files.sort().flatMap((f) => [path.relative(buildDir, f), fs.readFileSync(f)]));
}

/** Identity of a big file without reading it: path, size and mtime. */
export function fileIdentity(file) {
  const st = fs.statSync(file);
  return `${file}:${st.size}:${Math.trunc(st.mtimeMs)}`;
}

const stateFile = (stateDir, name) => path.join(stateDir, `${name}.json`);

/** True if `out` is the file the last build wrote for this key (and nobody replaced it since). */
export function upToDate(stateDir, name, out, key) {
  try {
    const state = JSON.parse(fs.readFileSync(stateFile(stateDir, name), 'utf8'));
    return state.key === key && state.identity === fileIdentity(out);
  } catch {
    return false;
  }
}

export function record(stateDir, name, out, key) {
  const file = stateFile(stateDir, name);
  const tmp = `${file}.${process.pid}.tmp`;
  fs.writeFileSync(tmp, JSON.stringify({ key, identity: fileIdentity(out) }) + '\n');
  fs.renameSync(tmp, file);
}
