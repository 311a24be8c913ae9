// The MessagePack codec on its own: values round-trip in the smallest encoding, and what is
// not MessagePack (or not read here) is refused, not guessed.
import { test } from "node:test";
import assert from "node:assert/strict";
import { decode, encode } from "../dist/msgpack.js";

const hex = (bytes) => Buffer.from(bytes).toString("hex");

test("values round-trip, each in its smallest form", () => {
  const cases = [
    [null, "c0"],
    [true, "c3"],
    [false, "c2"],
    [0, "00"],
    [127, "7f"],
    [128, "cc80"],
    [65535, "cdffff"],
    [65536, "ce00010000"],
    [2 ** 40, "cf0000010000000000"],
    [-1, "ff"],
    [-32, "e0"],
    [-33, "d0df"],
    [-129, "d1ff7f"],
    [-40000, "d2ffff63c0"],
    [-(2 ** 40), "d3ffffff0000000000"],
    [1.5, "cb3ff8000000000000"],
    ["", "a0"],
    ["é", "a2c3a9"],
    ["x".repeat(32), "d920" + "78".repeat(32)],
    [new Uint8Array([0, 255]), "c40200ff"],
    [[1, [2]], "920191" + "02"],
    [{ id: 1, ping: {} }, "82a2696401a470696e6780"],
  ];
  for (const [value, want] of cases) {
    assert.equal(hex(encode(value)), want, JSON.stringify(value));
    assert.deepEqual(decode(encode(value)), value);
  }
  // Long forms.
  const long = "y".repeat(70000);
  assert.equal(decode(encode(long)), long);
  const many = Array.from({ length: 70000 }, (_, i) => i % 7);
  assert.deepEqual(decode(encode(many)), many);
  const bigBin = new Uint8Array(300).fill(9);
  assert.equal(hex(encode(bigBin).subarray(0, 3)), "c5012c");
  assert.deepEqual(decode(encode(bigBin)), bigBin);
  // Undefined properties are left out, as JSON.stringify does.
  assert.deepEqual(decode(encode({ a: undefined, b: 2 })), { b: 2 });
  // 64-bit integers past 2^53 come back as bigint.
  assert.equal(decode(Buffer.from("cfffffffffffffffff", "hex")), 2n ** 64n - 1n);
});

test("what is not MessagePack is refused", () => {
  assert.throws(() => decode(Buffer.from("a3616263ff", "hex")), /bytes after the value/);
  assert.throws(() => decode(Buffer.from("a461", "hex")), /truncated/);
  assert.throws(() => decode(Buffer.from("d40100", "hex")), /not read here/); // fixext 1
  assert.throws(() => decode(Buffer.from("a2c328", "hex")), TypeError); // not UTF-8
  assert.throws(() => decode(Buffer.from("810102", "hex")), /key that is not a string/);
  assert.throws(() => encode({ f() {} }), /cannot encode a function/);
  // A key named __proto__ is an own property, not the prototype.
  const o = decode(Buffer.from("81a95f5f70726f746f5f5f81a17801", "hex"));
  assert.deepEqual(Object.keys(o), ["__proto__"]);
  assert.equal(Object.getPrototypeOf(o), Object.prototype);
});
