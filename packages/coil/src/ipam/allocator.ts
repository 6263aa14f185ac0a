/**
 * A bitmap allocator for the addresses of one address block (pure, no I/O). Coil hands out every address
 * of a block, network and broadcast included (pod addresses are /32 and /128 host routes), so a /27 holds
 * 32 pods. Allocation starts after the last address handed out (no immediate reuse) and wraps around.
 */
export class BitmapAllocator {
  private readonly words: Uint32Array;
  private used = 0;
  private last = -1;

  constructor(readonly size: number) {
    if (!Number.isInteger(size) || size <= 0 || size > 1 << 24) throw new RangeError(`ipam: block size ${size} out of range`);
    this.words = new Uint32Array(Math.ceil(size / 32));
  }

  get count(): number {
    return this.used;
  }

  get free(): number {
    return this.size - this.used;
  }

  isSet(i: number): boolean {
    this.check(i);
    return (this.words[i >>> 5]! & (1 << (i & 31))) !== 0;
  }

  /** Takes the first free index after the last one taken (wrapping); undefined when full. */
  allocate(): number | undefined {
    if (this.used >= this.size) return undefined;
    for (let k = 1; k <= this.size; k++) {
      const i = (this.last + k) % this.size;
      if (!this.isSet(i)) {
        this.set(i);
        this.last = i;
        return i;
      }
    }
    return undefined;
  }

  /** Marks an index used (state rebuilt from the kernel). Returns false if it already was. */
  set(i: number): boolean {
    if (this.isSet(i)) return false;
    this.words[i >>> 5]! |= 1 << (i & 31);
    this.used++;
    return true;
  }

  /** Frees an index. Returns false if it was free. */
  clear(i: number): boolean {
    if (!this.isSet(i)) return false;
    this.words[i >>> 5]! &= ~(1 << (i & 31));
    this.used--;
    return true;
  }

  private check(i: number): void {
    if (!Number.isInteger(i) || i < 0 || i >= this.size) throw new RangeError(`ipam: index ${i} outside a block of ${this.size}`);
  }
}
