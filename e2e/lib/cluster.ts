/**
 * A real kube-apiserver for one e2e file (the kube kit's test cluster) with a work directory for its
 * state and for the logs of the built daemons the file starts, and the API through the kit's transport
 * with the cluster's admin kubeconfig. Not re-exported by index.ts: only the files that start a
 * cluster load the kube kit.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import type { KubeTransport } from '@cnikit/kube';
import { startCluster, stopCluster, transportFor, type ClusterInfo } from '@cnikit/kube-testing';
import { Daemons } from './daemons';
import { deleteAllNamespaces } from './netns';
import { REPO_ROOT } from './paths';

export class E2eCluster {
  /** the cluster's state and the daemons' logs */
  readonly work: string;
  readonly daemons: Daemons;
  private info?: ClusterInfo;
  private transport?: KubeTransport;

  constructor(prefix: string) {
    this.work = fs.mkdtempSync(path.join(os.tmpdir(), `${prefix}-`));
    this.daemons = new Daemons(this.work);
  }

  async start(): Promise<ClusterInfo> {
    this.info = await startCluster({
      stateDir: path.join(this.work, 'cluster'),
      buildScript: path.join(REPO_ROOT, 'tools/cluster/build.sh'),
    });
    return this.info;
  }

  get kubeconfig(): string {
    if (!this.info) throw new Error('E2eCluster: not started');
    return this.info.kubeconfig;
  }

  /** One API call; every status comes back (requestRaw). */
  api<T = Record<string, unknown>>(method: string, p: string, body?: unknown, contentType?: string): Promise<{ status: number; body: T }> {
    if (!this.info) throw new Error('E2eCluster: not started');
    this.transport ??= transportFor(this.info);
    return this.transport.requestRaw<T>(method, p, { body, contentType });
  }

  /** The end of every log in the work directory, for failure messages. */
  logs(): string {
    return fs
      .readdirSync(this.work)
      .filter((f) => f.endsWith('.log'))
      .map((f) => `--- ${f}\n${fs.readFileSync(path.join(this.work, f), 'utf8').slice(-3000)}`)
      .join('\n');
  }

  /** afterAll: stops the daemons, deletes the file's namespaces, stops the cluster, removes the work directory. */
  async stop(): Promise<void> {
    await this.daemons.stopAll();
    await deleteAllNamespaces();
    this.transport?.close();
    if (this.info) await stopCluster(this.info);
    fs.rmSync(this.work, { recursive: true, force: true });
  }
}
