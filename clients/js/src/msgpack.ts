/**
 * MessagePack (https://msgpack.org), as much of it as the channel protocol's binary format
 * needs and no more: nil, booleans, integers, floats, strings, `bin` (as `Uint8Array`),
 * arrays and maps with string keys. Extension types are refused.
 *
 * ```ts
 * decode(encode({ id: 1, ping: {} })); // { id: 1, ping: {} }
 * ```
 */

const utf8Encoder = new TextEncoder();
const utf8Decoder = new TextDecoder("utf-8", { fatal: true });

/** A growable byte buffer. */
class Writer {
  private bytes = new Uint8Array(64);
  private view = new DataView(this.bytes.buffer);
  length = 0;

  private reserve(n: number): number {
    const at = this.length;
    if (at + n > this.bytes.length) {
      const bigger = new Uint8Array(Math.max(this.bytes.length * 2, at + n));
      bigger.set(this.bytes.subarray(0, at));
      this.bytes = bigger;
      this.view = new DataView(bigger.buffer);
    }
    this.length = at + n;
    return at;
  }

  // Each reserves first, then reads `bytes`/`view`: reserving may replace them.
  u8(v: number): void {
    const at = this.reserve(1);
    this.bytes[at] = v;
  }
  u16(v: number): void {
    const at = this.reserve(2);
    this.view.setUint16(at, v);
  }
  u32(v: number): void {
    const at = this.reserve(4);
    this.view.setUint32(at, v);
  }
  u64(v: bigint): void {
    const at = this.reserve(8);
    this.view.setBigUint64(at, v);
  }
  i64(v: bigint): void {
    const at = this.reserve(8);
    this.view.setBigInt64(at, v);
  }
  f64(v: number): void {
    const at = this.reserve(8);
    this.view.setFloat64(at, v);
  }
  raw(b: Uint8Array): void {
    const at = this.reserve(b.length);
    this.bytes.set(b, at);
  }
  done(): Uint8Array {
    return this.bytes.slice(0, this.length);
  }
}

/** `value` as MessagePack. Objects become maps of their own enumerable properties (those
 * `undefined` are left out, as `JSON.stringify` does); a `Uint8Array` becomes `bin`. */
export function encode(value: unknown): Uint8Array {
  const w = new Writer();
  write(w, value, 0);
  return w.done();
}

function write(w: Writer, v: unknown, depth: number): void {
  if (depth > 100) throw new TypeError("MessagePack: nested deeper than 100");
  if (v === null || v === undefined) return w.u8(0xc0);
  if (v === false) return w.u8(0xc2);
  if (v === true) return w.u8(0xc3);
  if (typeof v === "number") return writeNumber(w, v);
  if (typeof v === "bigint") {
    if (v >= 0n) {
      w.u8(0xcf);
      return w.u64(v);
    }
    w.u8(0xd3);
    return w.i64(v);
  }
  if (typeof v === "string") {
    const b = utf8Encoder.encode(v);
    writeHead(w, b.length, 0xa0, 31, 0xd9, 0xda, 0xdb);
    return w.raw(b);
  }
  if (v instanceof Uint8Array) {
    writeHead(w, v.length, -1, -1, 0xc4, 0xc5, 0xc6);
    return w.raw(v);
  }
  if (Array.isArray(v)) {
    writeHead(w, v.length, 0x90, 15, -1, 0xdc, 0xdd);
    for (const item of v) write(w, item, depth + 1);
    return;
  }
  if (typeof v === "object") {
    const entries = Object.entries(v as object).filter(([, x]) => x !== undefined);
    writeHead(w, entries.length, 0x80, 15, -1, 0xde, 0xdf);
    for (const [k, x] of entries) {
      write(w, k, depth + 1);
      write(w, x, depth + 1);
    }
    return;
  }
  throw new TypeError(`MessagePack: cannot encode a ${typeof v}`);
}

function writeNumber(w: Writer, v: number): void {
  if (!Number.isInteger(v)) {
    w.u8(0xcb);
    return w.f64(v);
  }
  if (v >= 0) {
    if (v < 0x80) return w.u8(v);
    if (v < 0x100) return (w.u8(0xcc), w.u8(v));
    if (v < 0x10000) return (w.u8(0xcd), w.u16(v));
    if (v < 0x100000000) return (w.u8(0xce), w.u32(v));
    if (Number.isSafeInteger(v)) return (w.u8(0xcf), w.u64(BigInt(v)));
  } else {
    if (v >= -32) return w.u8(v & 0xff);
    if (v >= -0x80) return (w.u8(0xd0), w.u8(v & 0xff));
    if (v >= -0x8000) return (w.u8(0xd1), w.u16(v & 0xffff));
    if (v >= -0x80000000) return (w.u8(0xd2), w.u32(v >>> 0));
    if (Number.isSafeInteger(v)) return (w.u8(0xd3), w.i64(BigInt(v)));
  }
  w.u8(0xcb);
  w.f64(v);
}

/** The head of a string, bin, array or map of `n` items: the fix form (`fix` | n, when n ≤
 * `fixMax`), else the 8-, 16- or 32-bit length form (-1: the format has no such form). */
function writeHead(
  w: Writer,
  n: number,
  fix: number,
  fixMax: number,
  tag8: number,
  tag16: number,
  tag32: number,
): void {
  if (n <= fixMax) return w.u8(fix | n);
  if (tag8 >= 0 && n < 0x100) return (w.u8(tag8), w.u8(n));
  if (n < 0x10000) return (w.u8(tag16), w.u16(n));
  w.u8(tag32);
  w.u32(n);
}

/** One MessagePack value, read from all of `bytes`. Maps become objects (their keys must be
 * strings), `bin` a `Uint8Array`, 64-bit integers a number when safe and a `bigint` else.
 * Throws on truncated input, trailing bytes, extension types or invalid UTF-8. */
export function decode(bytes: Uint8Array): unknown {
  const r = new Reader(bytes);
  const value = r.value(0);
  if (r.at !== bytes.length) {
    throw new RangeError(`MessagePack: ${bytes.length - r.at} bytes after the value`);
  }
  return value;
}

class Reader {
  at = 0;
  private view: DataView;

  constructor(private readonly bytes: Uint8Array) {
    this.view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  }

  private take(n: number): number {
    const at = this.at;
    if (at + n > this.bytes.length) throw new RangeError("MessagePack: truncated");
    this.at = at + n;
    return at;
  }
  private u8(): number {
    return this.view.getUint8(this.take(1));
  }
  private u16(): number {
    return this.view.getUint16(this.take(2));
  }
  private u32(): number {
    return this.view.getUint32(this.take(4));
  }
  private slice(n: number): Uint8Array {
    const at = this.take(n);
    return this.bytes.slice(at, at + n);
  }
  private str(n: number): string {
    const at = this.take(n);
    return utf8Decoder.decode(this.bytes.subarray(at, at + n));
  }
  private int64(big: bigint): number | bigint {
    const n = Number(big);
    return Number.isSafeInteger(n) ? n : big;
  }

  value(depth: number): unknown {
    if (depth > 100) throw new RangeError("MessagePack: nested deeper than 100");
    const tag = this.u8();
    if (tag < 0x80) return tag;
    if (tag >= 0xe0) return tag - 0x100;
    if (tag < 0x90) return this.map(tag & 0x0f, depth);
    if (tag < 0xa0) return this.array(tag & 0x0f, depth);
    if (tag < 0xc0) return this.str(tag & 0x1f);
    switch (tag) {
      case 0xc0:
        return null;
      case 0xc2:
        return false;
      case 0xc3:
        return true;
      case 0xc4:
        return this.slice(this.u8());
      case 0xc5:
        return this.slice(this.u16());
      case 0xc6:
        return this.slice(this.u32());
      case 0xca:
        return this.view.getFloat32(this.take(4));
      case 0xcb:
        return this.view.getFloat64(this.take(8));
      case 0xcc:
        return this.u8();
      case 0xcd:
        return this.u16();
      case 0xce:
        return this.u32();
      case 0xcf:
        return this.int64(this.view.getBigUint64(this.take(8)));
      case 0xd0:
        return this.view.getInt8(this.take(1));
      case 0xd1:
        return this.view.getInt16(this.take(2));
      case 0xd2:
        return this.view.getInt32(this.take(4));
      case 0xd3:
        return this.int64(this.view.getBigInt64(this.take(8)));
      case 0xd9:
        return this.str(this.u8());
      case 0xda:
        return this.str(this.u16());
      case 0xdb:
        return this.str(this.u32());
      case 0xdc:
        return this.array(this.u16(), depth);
      case 0xdd:
        return this.array(this.u32(), depth);
      case 0xde:
        return this.map(this.u16(), depth);
      case 0xdf:
        return this.map(this.u32(), depth);
    }
    throw new RangeError(`MessagePack: type 0x${tag.toString(16)} is not read here`);
  }

  private array(n: number, depth: number): unknown[] {
    const out = new Array(n);
    for (let i = 0; i < n; i++) out[i] = this.value(depth + 1);
    return out;
  }

  private map(n: number, depth: number): Record<string, unknown> {
    const out: Record<string, unknown> = {};
    for (let i = 0; i < n; i++) {
      const key = this.value(depth + 1);
      if (typeof key !== "string") throw new TypeError("MessagePack: a map key that is not a string");
      // Own data properties only: a key named __proto__ must not change the prototype.
      Object.defineProperty(out, key, {
        value: this.value(depth + 1),
        enumerable: true,
        writable: true,
        configurable: true,
      });
    }
    return out;
  }
}
