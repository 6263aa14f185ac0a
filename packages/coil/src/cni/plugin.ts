/**
 * The thin `coil` CNI plugin: every verb is forwarded to coild over gRPC (raw HTTP/2, rpc/client.ts) with a
 * timeout; coild's CNIError comes back with its code. No Kubernetes client, no gRPC library, no netlink.
 * CNI 0.3.1 to 1.1.0; GC and STATUS too (Coil has neither).
 */
import { CniCode, CniError, ConfigError, TransientError, parseResult, type CmdArgs, type Result } from '@cnikit/netlib';
import { RpcError, UnavailableError, unaryCall } from '../rpc/client';
import { decodeAddResponse, encodeCNIArgs, type CNIArgs } from '../rpc/codec';

export const DEFAULT_SOCKET = '/run/coild.sock';
export const VERSIONS = ['0.3.1', '0.4.0', '1.0.0', '1.1.0'];
const TIMEOUT_MS = 60_000;

export function socketOf(a: CmdArgs): string {
  const s = a.conf['socket'];
  if (s === undefined) return DEFAULT_SOCKET;
  if (typeof s !== 'string' || s === '') throw new ConfigError('socket', 'a UNIX socket path', s);
  return s;
}

function argsOf(a: CmdArgs): Partial<CNIArgs> {
  const args: Record<string, string> = {};
  for (const k of ['K8S_POD_NAME', 'K8S_POD_NAMESPACE', 'K8S_POD_INFRA_CONTAINER_ID', 'K8S_POD_UID']) {
    const v = a.args[k];
    if (v !== undefined) args[k] = v;
  }
  args['IS_CHAINED'] = a.conf.prevResult !== undefined ? 'true' : 'false';
  return {
    containerId: a.containerId,
    netns: a.netns,
    ifname: a.ifName,
    args,
    path: a.path.join(':'),
    stdinData: a.stdin,
  };
}

async function call(a: CmdArgs, method: string): Promise<Buffer> {
  try {
    return await unaryCall(socketOf(a), method, encodeCNIArgs(argsOf(a)), TIMEOUT_MS);
  } catch (err) {
    if (err instanceof RpcError && err.cniError)
      throw new CniError(err.cniError.code || CniCode.Internal, err.cniError.msg, err.cniError.details);
    if (err instanceof UnavailableError) {
      if (method === 'Status') throw new CniError(CniCode.NotAvailable, 'coild is not reachable', err.message);
      throw new TransientError('coild is not reachable', err.message, { cause: err });
    }
    throw err;
  }
}

export async function add(a: CmdArgs): Promise<Result> {
  const out = decodeAddResponse(await call(a, 'Add'));
  return parseResult(out, { code: CniCode.Internal });
}
export async function del(a: CmdArgs): Promise<void> {
  await call(a, 'Del');
}
export async function check(a: CmdArgs): Promise<void> {
  await call(a, 'Check');
}
export async function gc(a: CmdArgs): Promise<void> {
  await call(a, 'GC');
}
export async function status(a: CmdArgs): Promise<void> {
  await call(a, 'Status');
}
