/**
 * Error classes of the kube kit. Callers decide by class or by the stable `code` (and, for API errors, by the
 * HTTP status and the server's `reason`), never by matching message strings. Messages are prefixed `kube:`.
 */

/** The wire form of metav1.Status, as the API server returns it for failures. */
export interface ApiStatus {
  kind?: 'Status';
  apiVersion?: string;
  status?: 'Success' | 'Failure';
  message?: string;
  reason?: string;
  code?: number;
  details?: {
    name?: string;
    group?: string;
    kind?: string;
    uid?: string;
    causes?: { reason?: string; message?: string; field?: string }[];
    retryAfterSeconds?: number;
  };
}

export class KubeError extends Error {
  readonly code: string;
  constructor(code: string, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'KubeError';
    this.code = code;
  }
}

/** The API server answered with a failure status (4xx/5xx, or an ERROR watch event). */
export class ApiError extends KubeError {
  /** HTTP status (the Status object's `code`). */
  readonly status: number;
  /** The server's machine-readable reason: NotFound, Conflict, AlreadyExists, Invalid, Expired, Gone, ... */
  readonly reason: string;
  readonly apiStatus: ApiStatus;
  readonly method: string;
  readonly path: string;
  constructor(method: string, path: string, status: number, body: ApiStatus | string, options?: { cause?: unknown }) {
    const st: ApiStatus = typeof body === 'string' ? { message: body.trim().slice(0, 500), code: status } : body;
    const reason = st.reason ?? reasonForStatus(status);
    super('ERR_KUBE_API', `kube: ${method} ${path}: ${status} ${reason}: ${st.message ?? ''}`.trimEnd(), options);
    this.name = 'ApiError';
    this.status = status;
    this.reason = reason;
    this.apiStatus = st;
    this.method = method;
    this.path = path;
  }
  /** Field-level causes the server gave (validation failures, CEL rule messages). */
  get causes(): { reason?: string; message?: string; field?: string }[] {
    return this.apiStatus.details?.causes ?? [];
  }
}

function reasonForStatus(status: number): string {
  switch (status) {
    case 400:
      return 'BadRequest';
    case 401:
      return 'Unauthorized';
    case 403:
      return 'Forbidden';
    case 404:
      return 'NotFound';
    case 405:
      return 'MethodNotAllowed';
    case 409:
      return 'Conflict';
    case 410:
      return 'Gone';
    case 415:
      return 'UnsupportedMediaType';
    case 422:
      return 'Invalid';
    case 429:
      return 'TooManyRequests';
    case 500:
      return 'InternalError';
    case 503:
      return 'ServiceUnavailable';
    case 504:
      return 'Timeout';
    default:
      return 'Unknown';
  }
}

/** The connection failed or broke before a complete answer (refused, reset, timed out, TLS). */
export class TransportError extends KubeError {
  readonly method: string;
  readonly path: string;
  constructor(method: string, path: string, cause: unknown) {
    super('ERR_KUBE_TRANSPORT', `kube: ${method} ${path}: ${(cause as Error)?.message ?? String(cause)}`, { cause });
    this.name = 'TransportError';
    this.method = method;
    this.path = path;
  }
}

/** Retries ran out (conflicts, or a transient failure that kept coming back). The last error is the cause. */
export class RetriesExhaustedError extends KubeError {
  readonly attempts: number;
  constructor(what: string, attempts: number, cause: unknown) {
    super(
      'ERR_KUBE_RETRIES_EXHAUSTED',
      `kube: ${what}: gave up after ${attempts} attempts: ${(cause as Error)?.message ?? String(cause)}`,
      { cause },
    );
    this.name = 'RetriesExhaustedError';
    this.attempts = attempts;
  }
}

/** An operation was cancelled through its AbortSignal or by stop()/shutdown. */
export class AbortedError extends KubeError {
  constructor(what: string, options?: { cause?: unknown }) {
    super('ERR_KUBE_ABORTED', `kube: ${what}: aborted`, options);
    this.name = 'AbortedError';
  }
}

/** A wait (CRD established, cache synced, ...) did not complete in time. */
export class KubeTimeoutError extends KubeError {
  constructor(what: string, ms: number) {
    super('ERR_KUBE_TIMEOUT', `kube: ${what}: not done after ${ms} ms`);
    this.name = 'KubeTimeoutError';
  }
}

/** Bad arguments or configuration given to the kit (not a server answer). */
export class KubeConfigError extends KubeError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('ERR_KUBE_CONFIG', `kube: ${message}`, options);
    this.name = 'KubeConfigError';
  }
}

const apiError = (err: unknown): ApiError | undefined => (err instanceof ApiError ? err : undefined);

export const isNotFound = (err: unknown): boolean => apiError(err)?.status === 404;
/** 409 with reason Conflict: the resourceVersion was stale (optimistic concurrency). */
export const isConflict = (err: unknown): boolean => apiError(err)?.status === 409 && apiError(err)?.reason === 'Conflict';
export const isAlreadyExists = (err: unknown): boolean => apiError(err)?.reason === 'AlreadyExists';
export const isInvalid = (err: unknown): boolean => apiError(err)?.status === 422;
/** 410 Gone / reason Expired: a watch or list continuation asked for a resourceVersion that was compacted. */
export const isGone = (err: unknown): boolean => {
  const e = apiError(err);
  return e !== undefined && (e.status === 410 || e.reason === 'Expired' || e.reason === 'Gone');
};
/** Worth retrying as is: transport failures, 429, 500, 503, 504. */
export const isTransient = (err: unknown): boolean => {
  if (err instanceof TransportError) return true;
  const e = apiError(err);
  return e !== undefined && [429, 500, 502, 503, 504].includes(e.status);
};
