/**
 * An explicit undo stack for ADD: each step that changes the kernel pushes
 * the function that reverts it; on failure the stack runs in reverse, every
 * entry even if some fail (a failed revert must not hide the original
 * error), and the original error is rethrown by the caller.
 */
export class UndoStack {
  private readonly steps: { what: string; fn: () => Promise<void> | void }[] = [];

  push(what: string, fn: () => Promise<void> | void): void {
    this.steps.push({ what, fn });
  }

  /** Runs every revert step, newest first. Returns the failures as strings, for logging. */
  async unwind(): Promise<string[]> {
    const failures: string[] = [];
    while (this.steps.length > 0) {
      const step = this.steps.pop()!;
      try {
        await step.fn();
      } catch (e) {
        failures.push(`${step.what}: ${e instanceof Error ? e.message : String(e)}`);
      }
    }
    return failures;
  }

  /** Forget every step: the operation succeeded. */
  commit(): void {
    this.steps.length = 0;
  }
}
