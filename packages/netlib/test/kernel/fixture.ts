/**
 * Per-test namespaces for kernel tests: a fresh "host" and "container" namespace
 * before each test, both deleted after it. Tests never touch the machine's own
 * namespace.
 */
import { cleanupAll, newNs, type TestNs } from '@cnikit/netlib-testing';
import { closeAllSockets } from '../../src/netns';

export interface Namespaces {
  host: TestNs;
  ctr: TestNs;
}

export function useNamespaces(): Namespaces {
  const t = {} as Namespaces;
  beforeEach(() => {
    t.host = newNs();
    t.ctr = newNs();
  });
  afterEach(() => cleanupAll());
  afterAll(() => closeAllSockets());
  return t;
}

/** Resolves with the rejection of `p` (fails the test when it resolves). */
export async function rejection(p: Promise<unknown>): Promise<Error & Record<string, unknown>> {
  try {
    await p;
  } catch (err) {
    return err as Error & Record<string, unknown>;
  }
  throw new Error('expected a rejection');
}

/** The error thrown by `fn` (fails the test when it returns). */
export function thrown(fn: () => unknown): Error & Record<string, unknown> {
  try {
    fn();
  } catch (err) {
    return err as Error & Record<string, unknown>;
  }
  throw new Error('expected an exception');
}
