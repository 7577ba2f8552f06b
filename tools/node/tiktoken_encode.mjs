// The reference token ids: encodes a UTF-8 file with the npm package tiktoken (OpenAI's tiktoken compiled to
// WASM) as o200k_base, all text ordinary, and writes the ids as little-endian uint32.
// Usage: node tiktoken_encode.mjs IN_FILE OUT_FILE
import { readFileSync, writeFileSync } from "node:fs";
import { get_encoding } from "tiktoken";

const [input, output] = process.argv.slice(2);
if (!input || !output) {
  console.error("usage: node tiktoken_encode.mjs IN_FILE OUT_FILE");
  process.exit(2);
}
const encoding = get_encoding("o200k_base");
const ids = encoding.encode_ordinary(readFileSync(input, "utf8"));
writeFileSync(output, Buffer.from(ids.buffer, ids.byteOffset, ids.byteLength));
encoding.free();
console.log(`tiktoken: ${ids.length} tokens`);
