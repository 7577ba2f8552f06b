// Encode throughput of the npm package tiktoken (OpenAI's tiktoken compiled to WASM), single-threaded, on a
// text file: o200k_base, encode_ordinary, best of N runs in MB/s (10^6 bytes of UTF-8 per second), by
// wall-clock and by the process's CPU time.
// Usage: node tiktoken_bench.mjs FILE [N]
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";
import { dirname, join } from "node:path";

// tiktoken is installed under tools/node (scripts/setup.sh).
const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(join(here, "../../tools/node/package.json"));
const { get_encoding } = require("tiktoken");
const { version } = JSON.parse(readFileSync(join(here, "../../tools/node/node_modules/tiktoken/package.json"), "utf8"));

const [file, repeatText] = process.argv.slice(2);
const repeat = Number(repeatText ?? 5);
const bytes = readFileSync(file);
const text = bytes.toString("utf8");
const encoding = get_encoding("o200k_base");
let bestWall = Infinity;
let bestCpu = Infinity;
let tokens = 0;
for (let r = 0; r < repeat; ++r) {
  const start = process.hrtime.bigint();
  const cpuStart = process.cpuUsage();  // the process's user + system time: the encoder's, and any GC thread's
  tokens = encoding.encode_ordinary(text).length;
  const cpu = process.cpuUsage(cpuStart);
  bestCpu = Math.min(bestCpu, (cpu.user + cpu.system) / 1e6);
  bestWall = Math.min(bestWall, Number(process.hrtime.bigint() - start) / 1e9);
}
encoding.free();
const rate = (seconds) => (bytes.length / seconds / 1e6).toFixed(2).padStart(7);
console.log(`tiktoken  encode_ordinary: ${rate(bestWall)} MB/s wall, ${rate(bestCpu)} MB/s CPU time  ` +
            `(${bytes.length} bytes, ${tokens} tokens, best of ${repeat}, npm tiktoken ${version}, node ${process.version})`);
