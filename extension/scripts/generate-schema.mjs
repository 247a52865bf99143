// Writes schema/draft/schema.json from schema/draft/schema.ts; with --check, compares instead
// and exits 1 when the file checked in is not what the types give.
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { createGenerator } from "ts-json-schema-generator";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const source = join(root, "schema", "draft", "schema.ts");
const target = join(root, "schema", "draft", "schema.json");

const generated = createGenerator({
  path: source,
  tsconfig: join(root, "tsconfig.json"),
  type: "*",
  expose: "export",
  topRef: true,
  jsDoc: "extended",
  additionalProperties: true,
}).createSchema("*");
const text = JSON.stringify(generated, null, 2) + "\n";

if (process.argv.includes("--check")) {
  if (readFileSync(target, "utf-8") !== text) {
    console.error("schema/draft/schema.json is not what schema.ts gives: run `npm run generate`");
    process.exit(1);
  }
  console.log("schema/draft/schema.json is what schema.ts gives");
} else {
  writeFileSync(target, text);
  console.log(`wrote ${target}`);
}
