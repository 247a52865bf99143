// The fingerprint corpus: every case's digest is the one the Python library's rules.fingerprint
// gives (tests/test_fingerprint_corpus.py asserts that side), so a retry across languages is a replay.

import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { type Json, canonical, fingerprint, holdsUnsafeInteger } from "../src/rules.js";

interface Case { case: string; tool: string; arguments: string; digest: string; beyondDouble?: boolean }
const corpus = JSON.parse(readFileSync(new URL("./fingerprint-corpus.json", import.meta.url), "utf8")) as { cases: Case[] };
const hex = (bytes: Uint8Array) => Buffer.from(bytes).toString("hex");

describe("the fingerprint corpus", () => {
  const exact = corpus.cases.filter((entry) => !entry.beyondDouble);
  it.each(exact.map((entry) => [entry.case, entry] as const))("%s digests as in Python", (_, entry) => {
    expect(hex(fingerprint(entry.tool, JSON.parse(entry.arguments) as { [member: string]: Json }))).toBe(entry.digest);
  });

  const beyond = corpus.cases.filter((entry) => entry.beyondDouble);
  it("holds an integer JSON.parse cannot keep", () => expect(beyond.length).toBeGreaterThan(0));
  it.each(beyond.map((entry) => [entry.case, entry] as const))("%s is refused as parsed, and digests as in Python kept exact", (_, entry) => {
    const parsed = JSON.parse(entry.arguments) as { [member: string]: Json };
    expect(holdsUnsafeInteger(parsed)).toBe(true); // the layer refuses such a keyed call
    const exactly = JSON.parse(entry.arguments.replace(/(\d{16,})/g, '"$1"'), (_name, value: unknown) =>
      typeof value === "string" && /^\d{16,}$/.test(value) ? BigInt(value) : value) as { [member: string]: Json };
    expect(hex(fingerprint(entry.tool, exactly))).toBe(entry.digest);
  });
});

describe("the canonical spelling", () => {
  it("names members by code point, not UTF-16 unit", () => {
    expect(canonical({ "\uffff": 1, "\u{1F600}": 2 })).toBe('{"\uffff":1,"\u{1F600}":2}');
  });
  it("spells a whole float as its exact integer", () => {
    expect(canonical(1e21)).toBe("1000000000000000000000");
  });
  it("spells -0 as 0, and a whole number on either side of 2^53 by its digits", () => {
    expect(canonical([-0, 2 ** 53 - 1, 2 ** 53, 1e20])).toBe("[0,9007199254740991,9007199254740992,100000000000000000000]");
  });
  it("spells 1e-6 with an exponent, as Python's serialiser does", () => {
    expect(canonical([1e-6, 1e-5, 1.5e-6])).toBe("[1e-6,0.00001,1.5e-6]");
  });
});
