// Writes the Parquet files tests/bench/parquet_test.cc reads, with the MLPerf datasets' column names and types,
// through two independent writers: arrow-rs (parquet-wasm, fed by apache-arrow; the same Arrow-to-Parquet path
// as pyarrow, which wrote the MLPerf files) and parquetjs-lite. Run from tools/node after `npm install`:
//   node write_parquet_fixtures.mjs ../../tests/bench/fixtures/parquet
// Row i (of 12) holds: prompt tokens [1000 * i + j for j in 0 .. i % 7 + 1], dataset "aime25" / "gpqa_diamond" /
// "livecodebench_v6" by i % 3, ground_truth "answer-<i>", num_tokens the prompt length. The test checks exactly this.
// speed_bench_shape.parquet has SPEED-Bench's prepared columns (question_id, category, sub_category, turns as
// list<string>, source, multiturn): row i is question "q<i>", category by i % 3, i % 3 + 1 turns "turn <j> of q<i>"
// except turn 1, "tour 1 de q<i> — été" (non-ASCII).
import fs from "node:fs";
import path from "node:path";
import * as arrow from "apache-arrow";
import * as parquetWasm from "parquet-wasm";
import parquetjs from "parquetjs-lite";

const ROWS = 12;
const datasets = ["aime25", "gpqa_diamond", "livecodebench_v6"];
const prompt = (i) => Array.from({ length: (i % 7) + 2 }, (_, j) => 1000 * i + j);

function arrowTable(promptColumn, intType) {
  const wide = intType instanceof arrow.Int64;
  const prompts = arrow.vectorFromArray(
    Array.from({ length: ROWS }, (_, i) => (wide ? prompt(i).map(BigInt) : prompt(i))),
    new arrow.List(new arrow.Field("element", intType, true)));
  return new arrow.Table({
    [promptColumn]: prompts,
    dataset: arrow.vectorFromArray(Array.from({ length: ROWS }, (_, i) => datasets[i % 3]), new arrow.Utf8()),
    ground_truth: arrow.vectorFromArray(Array.from({ length: ROWS }, (_, i) => `answer-${i}`), new arrow.Utf8()),
    num_tokens: arrow.vectorFromArray(Array.from({ length: ROWS }, (_, i) => BigInt(prompt(i).length)), new arrow.Int64()),
  });
}

function writeArrow(file, table, configure) {
  const wasmTable = parquetWasm.Table.fromIPCStream(arrow.tableToIPC(table, "stream"));
  const props = configure(new parquetWasm.WriterPropertiesBuilder()).build();
  fs.writeFileSync(file, parquetWasm.writeParquet(wasmTable, props));
}

async function writeParquetjs(file, compression, useDataPageV2) {
  // parquetjs-lite writes a list as a bare repeated field (no LIST group), the layout older writers use.
  const schema = new parquetjs.ParquetSchema({
    input_tokens: { type: "INT32", repeated: true, compression },
    dataset: { type: "UTF8", compression },
    ground_truth: { type: "UTF8", optional: true, compression },
  });
  const writer = await parquetjs.ParquetWriter.openFile(schema, file, { useDataPageV2, rowGroupSize: 5 });
  for (let i = 0; i < ROWS; ++i)
    await writer.appendRow({ input_tokens: prompt(i), dataset: datasets[i % 3], ground_truth: `answer-${i}` });
  await writer.close();
}

const out = process.argv[2];
if (!out) throw new Error("usage: node write_parquet_fixtures.mjs OUTPUT_DIR");
fs.mkdirSync(out, { recursive: true });
const { Compression, WriterVersion, Encoding } = parquetWasm;
// pyarrow's defaults: data page v1, dictionary encoding, SNAPPY.
writeArrow(path.join(out, "arrow_v1_snappy_dictionary.parquet"), arrowTable("input_tokens", new arrow.Int32()),
  (b) => b.setCompression(Compression.SNAPPY).setWriterVersion(WriterVersion.V1).setDictionaryEnabled(true));
// Data page v2, ZSTD, PLAIN values, int64 ids, several row groups.
writeArrow(path.join(out, "arrow_v2_zstd_plain.parquet"), arrowTable("input_tokens", new arrow.Int64()),
  (b) => b.setCompression(Compression.ZSTD).setWriterVersion(WriterVersion.V2).setDictionaryEnabled(false)
    .setEncoding(Encoding.PLAIN).setMaxRowGroupSize(5));
// The pre-v4 column name, uncompressed; and GZIP.
writeArrow(path.join(out, "arrow_v1_uncompressed_tok_input.parquet"), arrowTable("tok_input", new arrow.Int32()),
  (b) => b.setCompression(Compression.UNCOMPRESSED).setWriterVersion(WriterVersion.V1).setDictionaryEnabled(false));
writeArrow(path.join(out, "arrow_v1_gzip.parquet"), arrowTable("input_tokens", new arrow.Int32()),
  (b) => b.setCompression(Compression.GZIP).setWriterVersion(WriterVersion.V1).setDictionaryEnabled(true));
// SPEED-Bench's prepared shape as pyarrow writes it (data page v1, dictionary, SNAPPY).
const categories = ["coding", "math", "writing"];
const turns = (i) =>
  Array.from({ length: (i % 3) + 1 }, (_, j) => (j === 1 ? `tour ${j} de q${i} — été` : `turn ${j} of q${i}`));
const speed = new arrow.Table({
  question_id: arrow.vectorFromArray(Array.from({ length: ROWS }, (_, i) => `q${i}`), new arrow.Utf8()),
  category: arrow.vectorFromArray(Array.from({ length: ROWS }, (_, i) => categories[i % 3]), new arrow.Utf8()),
  sub_category: arrow.vectorFromArray(Array.from({ length: ROWS }, () => "none"), new arrow.Utf8()),
  turns: arrow.vectorFromArray(Array.from({ length: ROWS }, (_, i) => turns(i)),
    new arrow.List(new arrow.Field("element", new arrow.Utf8(), true))),
  source: arrow.vectorFromArray(Array.from({ length: ROWS }, () => "fixture"), new arrow.Utf8()),
  multiturn: arrow.vectorFromArray(Array.from({ length: ROWS }, (_, i) => i % 3 > 0), new arrow.Bool()),
});
writeArrow(path.join(out, "speed_bench_shape.parquet"), speed,
  (b) => b.setCompression(Compression.SNAPPY).setWriterVersion(WriterVersion.V1).setDictionaryEnabled(true));
await writeParquetjs(path.join(out, "parquetjs_snappy_v1.parquet"), "SNAPPY", false);
await writeParquetjs(path.join(out, "parquetjs_uncompressed_v2.parquet"), "UNCOMPRESSED", true);
console.log(`wrote ${fs.readdirSync(out).length} files to ${out}`);
