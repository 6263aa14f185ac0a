/**
 * Whether this process may block on a socket: only a one-shot CNI call, whose event loop has nothing else
 * to do (pluginMain says so for every plugin binary). Apart from index.ts so that the dispatcher, which
 * every call (VERSION included) loads, does not load the addon loader with it.
 */
let allowed = false;

/** Called by a process whose event loop has nothing else to do: a CNI plugin binary's main (tests: either way). */
export function allowBlockingSockets(on = true): void {
  allowed = on;
}

export function blockingSocketsAllowed(): boolean {
  return allowed;
}
