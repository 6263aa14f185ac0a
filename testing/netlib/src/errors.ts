/**
 * The error a test expects, typed by its class, so the test can assert on its fields (code, field, status).
 * An error of another class is rethrown as it is, and no error at all fails the test: either way jest
 * reports what really happened rather than a property read on undefined.
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- any constructor signature: error classes differ
type ErrorClass<E extends Error> = abstract new (...args: any[]) => E;

function expected<E extends Error>(cls: ErrorClass<E>, err: unknown): E {
  if (err instanceof cls) return err;
  throw err;
}

/** The `cls` error `fn` throws. */
export function thrownBy<E extends Error>(cls: ErrorClass<E>, fn: () => unknown): E {
  try {
    fn();
  } catch (err) {
    return expected(cls, err);
  }
  throw new Error(`expected a ${cls.name}`);
}

/** The `cls` error `p` rejects with. */
export async function rejectedWith<E extends Error>(cls: ErrorClass<E>, p: Promise<unknown>): Promise<E> {
  try {
    await p;
  } catch (err) {
    return expected(cls, err);
  }
  throw new Error(`expected a rejection with a ${cls.name}`);
}
