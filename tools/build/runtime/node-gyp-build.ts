/**
 * Stands in for `node-gyp-build` inside the executables (tools/build/lib/bundle.mjs maps
 * the netlink package's import of it here). The real one looks for a .node file beside
 * the package at import time; in an executable there is no such file, and a startup
 * snapshot cannot hold a loaded addon anyway. This returns a binding whose members are
 * looked up on first use, through netlib's loader (SEA asset -> cache file -> dlopen).
 */
import { loadAddon } from '../../../packages/netlib/src/native/index';

type Binding = Record<PropertyKey, unknown>;

const binding = (): Binding => loadAddon('netlink') as Binding;

function lazyNetlinkBinding(_dir: string): Binding {
  return new Proxy({} as Binding, {
    get: (_t, key) => binding()[key],
    has: (_t, key) => key in binding(),
    ownKeys: () => Reflect.ownKeys(binding()),
    getOwnPropertyDescriptor: (_t, key) => {
      const d = Reflect.getOwnPropertyDescriptor(binding(), key);
      return d && { ...d, configurable: true }; // proxy invariant: the empty target has no such property
    },
  });
}

export = lazyNetlinkBinding;
