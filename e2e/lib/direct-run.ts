/**
 * Suites that run one built plugin directly, the way a runtime does (execPlugin: CNI_* env vars and the
 * config on stdin, inside the node namespace), on a pod set up as the earlier plugins of its chain would
 * have left it. Bad input must print a CNI error object and change nothing in the node or the pod: the
 * suite keeps snapshots of both to check that.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execPlugin, PluginEnv } from './cni';
import { diffSnapshots, NetSnapshot, snapshot } from './inspect';
import { deleteAllNamespaces, Netns } from './netns';
import { MacvlanNode } from './topology';

export interface DirectRunSuite {
  topo: MacvlanNode;
  pod: Netns;
  /** for the plugin's log_file */
  logDir: string;
  /** the node as the suite started */
  nodeBefore: NetSnapshot;
  /** Expects the node and the pod to be exactly as the suite started. */
  unchanged(): Promise<void>;
}

/**
 * Called in a describe body: beforeAll makes the node (`makeNode`) and the pod (`preparePod` puts in it
 * what the earlier plugins would have), afterAll deletes every namespace of the file and the log dir.
 * The fields are set once beforeAll has run.
 */
export function directRunSuite(
  makeNode: () => Promise<MacvlanNode>,
  preparePod: (topo: MacvlanNode, pod: Netns) => Promise<void>,
): DirectRunSuite {
  let podBefore: NetSnapshot;
  const suite = {
    async unchanged(): Promise<void> {
      expect(diffSnapshots(suite.nodeBefore, await snapshot(suite.topo.node))).toEqual([]);
      expect(diffSnapshots(podBefore, await snapshot(suite.pod))).toEqual([]);
    },
  } as DirectRunSuite;
  beforeAll(async () => {
    suite.topo = await makeNode();
    suite.pod = await Netns.create('pod');
    await preparePod(suite.topo, suite.pod);
    suite.logDir = mkdtempSync(join(tmpdir(), 'cnikit-e2e-log-'));
    suite.nodeBefore = await snapshot(suite.topo.node);
    podBefore = await snapshot(suite.pod);
  });
  afterAll(async () => {
    await deleteAllNamespaces();
    if (suite.logDir) rmSync(suite.logDir, { recursive: true, force: true });
  });
  return suite;
}

/** One row of a bad-input table. */
export interface ErrorCase {
  name: string;
  /** the CNI error code the plugin must print */
  code: number;
  /** the environment of the run, when not the suite's usual ADD */
  env?: () => PluginEnv;
  stdin: () => string | object;
  /** what the message or its details must name */
  mentions?: RegExp;
}

/**
 * Runs `binary` on case `c` (with `env` unless the case brings its own) inside `node`, and expects a
 * non-zero exit with a CNI error object on stdout: the case's code, a cniVersion, a message that names
 * what `mentions` asks for.
 */
export async function expectCniError(binary: string, c: ErrorCase, env: PluginEnv, node: Netns): Promise<void> {
  const r = await execPlugin(binary, c.env ? c.env() : env, c.stdin(), node);
  const where = `exit ${r.code}\nstdout: ${r.stdout}\nstderr: ${r.stderr}`;
  expect({ exitNonZero: r.code !== 0, where }).toEqual({ exitNonZero: true, where });
  expect(r.json).toEqual(expect.objectContaining({ code: c.code, msg: expect.any(String) }));
  expect(typeof r.json.cniVersion).toBe('string');
  expect(r.json.msg.length).toBeGreaterThan(0);
  if (c.mentions) expect(`${r.json.msg} ${r.json.details ?? ''}`).toMatch(c.mentions);
}

/** A well-formed config of the suite with `over` laid on top (a field set to undefined is left out). */
export type ConfOf = (over?: Record<string, unknown>) => Record<string, unknown>;

/**
 * The bad input every chained plugin of ours refuses the same way: skel's checks (JSON, version,
 * command, netns) and a missing prevResult. `env(over)` is the suite's ADD environment with `over`.
 */
export function chainedErrorCases(env: (over: PluginEnv) => PluginEnv, conf: ConfOf): ErrorCase[] {
  return [
    { name: 'malformed JSON', code: 6, stdin: () => '{"cniVersion": "1.0.0", "name": ' },
    { name: 'unknown cniVersion', code: 1, stdin: () => conf({ cniVersion: '9.9.9' }), mentions: /9\.9\.9|version/i },
    { name: 'unknown CNI_COMMAND', code: 4, env: () => env({ CNI_COMMAND: 'FROB' }), stdin: () => conf(), mentions: /FROB/ },
    { name: 'absent netns on ADD', code: 3, env: () => env({ CNI_NETNS: '/run/netns/cke-no-such-netns' }), stdin: () => conf() },
    { name: 'missing prevResult', code: 7, stdin: () => conf({ prevResult: undefined }), mentions: /prevResult/ },
  ];
}

/** Fields that hold a list of CIDRs, each set to a list of one bad CIDR: refused with code 7, naming the field. */
export function badCidrCases(conf: ConfOf, bad: Record<string, string>): ErrorCase[] {
  return Object.entries(bad).map(([field, cidr]) => ({
    name: `bad CIDR in ${field}`,
    code: 7,
    stdin: () => conf({ [field]: [cidr] }),
    mentions: new RegExp(field),
  }));
}
