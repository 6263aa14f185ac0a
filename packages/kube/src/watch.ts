/**
 * Watch streams: GET ...?watch=1 read as newline-delimited JSON events. A watch starts after a
 * resourceVersion (exclusive), so resuming from the last version seen neither misses nor repeats events, as
 * long as that version is still in the server's history; when it is not, the server answers 410 Gone (or an
 * ERROR event with code 410) and the caller has to list again.
 */
import { ApiError, KubeError, type ApiStatus } from './errors';
import type { KubeObject } from './resource';
import type { KubeTransport } from './transport';

export type WatchEventType = 'ADDED' | 'MODIFIED' | 'DELETED' | 'BOOKMARK';

export interface WatchEvent<T extends KubeObject> {
  type: WatchEventType;
  /** For BOOKMARK only metadata.resourceVersion (and annotations) are set. */
  object: T;
}

export interface WatchOptions {
  /** Start after this version; "" or undefined means "now" (with initial ADDED events for existing objects). */
  resourceVersion?: string;
  /** Ask for BOOKMARK events, which advance the resume point without object changes. Default true. */
  allowWatchBookmarks?: boolean;
  labelSelector?: string;
  fieldSelector?: string;
  /** Server-side end of the watch; the stream then ends normally. */
  timeoutSeconds?: number;
  /** Streaming list: initial state as ADDED events ending with a bookmark annotated k8s.io/initial-events-end. */
  sendInitialEvents?: boolean;
  signal?: AbortSignal;
}

/** The watch's resourceVersion is too old (compacted): list again, then watch from the list's version. */
export class WatchExpiredError extends ApiError {
  constructor(path: string, status: ApiStatus) {
    super('GET', path, 410, { ...status, code: 410, reason: status.reason ?? 'Expired' });
    this.name = 'WatchExpiredError';
  }
}

export async function* watchEvents<T extends KubeObject>(
  transport: KubeTransport,
  path: string,
  opts: WatchOptions = {},
): AsyncGenerator<WatchEvent<T>> {
  const query = {
    watch: 'true',
    resourceVersion: opts.resourceVersion || undefined,
    allowWatchBookmarks: opts.allowWatchBookmarks ?? true,
    labelSelector: opts.labelSelector,
    fieldSelector: opts.fieldSelector,
    timeoutSeconds: opts.timeoutSeconds,
    sendInitialEvents: opts.sendInitialEvents,
    resourceVersionMatch: opts.sendInitialEvents ? 'NotOlderThan' : undefined,
  };
  // A watch sends nothing while nothing changes; treat silence past the server's own deadline (+30 s) as broken.
  const idleTimeoutMs = opts.timeoutSeconds ? (opts.timeoutSeconds + 30) * 1000 : 0;
  try {
    for await (const line of transport.streamLines(path, { query, signal: opts.signal, idleTimeoutMs })) {
      let ev: { type: string; object: unknown };
      try {
        ev = JSON.parse(line) as { type: string; object: unknown };
      } catch (err) {
        throw new KubeError('ERR_KUBE_WATCH_DECODE', `kube: watch ${path}: undecodable event: ${line.slice(0, 200)}`, { cause: err });
      }
      if (ev.type === 'ERROR') {
        const st = (ev.object ?? {}) as ApiStatus;
        if (st.code === 410 || st.reason === 'Expired' || st.reason === 'Gone') throw new WatchExpiredError(path, st);
        throw new ApiError('GET', path, st.code ?? 500, st);
      }
      yield ev as WatchEvent<T>;
    }
  } catch (err) {
    if (err instanceof ApiError && !(err instanceof WatchExpiredError) && err.status === 410) {
      throw new WatchExpiredError(path, err.apiStatus);
    }
    throw err;
  }
}
