// Writes o200k_base.tiktoken (one "base64(token bytes) rank" line per mergeable token, as OpenAI publishes it)
// from the npm package tiktoken's encoders/o200k_base.json, whose "bpe_ranks" string is
// "! <first rank> <base64> <base64> ..." with ranks counting up from the first.
// Usage: node convert_o200k.mjs OUT_FILE
import { createRequire } from "node:module";
import { writeFileSync, renameSync } from "node:fs";

const require = createRequire(import.meta.url);
const out = process.argv[2];
if (!out) {
  console.error("usage: node convert_o200k.mjs OUT_FILE");
  process.exit(2);
}
const { bpe_ranks: packed } = require("tiktoken/encoders/o200k_base.json");
const lines = [];
for (const group of packed.split("\n")) {
  if (group.length === 0) continue;
  const fields = group.split(" ");
  if (fields[0] !== "!" || fields.length < 2) throw new Error(`unexpected bpe_ranks group: ${group.slice(0, 40)}`);
  let rank = Number(fields[1]);
  for (const token of fields.slice(2)) lines.push(`${token} ${rank++}\n`);
}
writeFileSync(out + ".tmp", lines.join(""));
renameSync(out + ".tmp", out);
console.log(`wrote ${lines.length} ranks to ${out}`);
