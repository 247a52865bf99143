// The store-key corpus: each principal and key is spelled as the Python library's store spells it
// (tests/test_store_key_corpus.py asserts that side), so a retry across languages finds its record.

import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { principalName, scopedKey } from "../src/rules.js";

interface Case { case: string; principal: string[]; key: string; principalName: string; scopedKey: string }
const corpus = JSON.parse(readFileSync(new URL("./store-key-corpus.json", import.meta.url), "utf8")) as { cases: Case[] };

describe("the store-key corpus", () => {
  it.each(corpus.cases.map((entry) => [entry.case, entry] as const))("%s is spelled as in Python", (_, entry) => {
    expect([principalName(entry.principal), scopedKey(entry.principal, entry.key)]).toEqual([entry.principalName, entry.scopedKey]);
  });
});
