/**
 * Network namespaces: handles, switching the calling thread, per-namespace sockets.
 * Every kernel operation in netlib takes a Netns explicitly.
 */
export { openNetns, openNetnsIfPresent, hostNetns, withHostNetns, runInNetns, sameNetns, NETNS_RUN_DIR, type Netns } from './handle';
export { rtnl, closeAllSockets } from './sockets';
export { execInNetns, type ExecResult, type ExecOptions } from './exec';
