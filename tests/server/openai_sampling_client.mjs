// The generation parameters through the official openai npm client, unchanged, streaming and not: logprobs
// (chat and completions), echo with prompt logprobs as lm-evaluation-harness's local-completions sends it,
// penalties, logit_bias, min_tokens, stop_token_ids, ignore_eos, structured outputs, n on completions and chat,
// forced tool calls, and the 400s for values out of range or parameters not served.
// tests/server/sampling_params_test.cc starts the server (the tiny model on the CPU runner) and checks the
// report this prints against its oracles. Usage: node openai_sampling_client.mjs PORT
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, "../../tools/node/package.json"));
const { OpenAI } = require("openai");

const port = process.argv[2];
const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: "unused", maxRetries: 0 });
const report = {};
const prompt = [200006, 17360, 200008, 12194, 11, 2375, 0, 3673, 382, 290];

// Non-streamed and streamed answers of one completions request, merged per choice.
async function completions(body) {
  const once = await client.completions.create(body);
  const stream = await client.completions.create({ ...body, stream: true });
  const merged = { text: "", token_ids: [], logprobs: null, finish_reason: null };
  for await (const chunk of stream) {
    const c = chunk.choices[0];
    if (!c) continue;
    merged.text += c.text;
    merged.token_ids.push(...(c.token_ids ?? []));
    if (c.logprobs) {
      merged.logprobs ??= { tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] };
      for (const key of Object.keys(merged.logprobs)) merged.logprobs[key].push(...c.logprobs[key]);
    }
    if (c.finish_reason) merged.finish_reason = c.finish_reason;
  }
  const c = once.choices[0];
  return { once: { text: c.text, token_ids: c.token_ids, logprobs: c.logprobs, finish_reason: c.finish_reason }, stream: merged };
}

async function chat(body) {
  const once = await client.chat.completions.create(body);
  const stream = await client.chat.completions.create({ ...body, stream: true, stream_options: { include_usage: true } });
  const merged = { content: "", logprobs: null, finish_reason: null, usage: null };
  for await (const chunk of stream) {
    if (chunk.usage) merged.usage = chunk.usage;
    const c = chunk.choices[0];
    if (!c) continue;
    merged.content += c.delta?.content ?? "";
    if (c.logprobs) (merged.logprobs ??= []).push(...c.logprobs.content);
    if (c.finish_reason) merged.finish_reason = c.finish_reason;
  }
  const c = once.choices[0];
  return {
    once: { content: c.message.content, logprobs: c.logprobs?.content ?? null, finish_reason: c.finish_reason, usage: once.usage },
    stream: merged,
  };
}

const messages = [{ role: "user", content: "Hi" }];
report.prompt = prompt;
report.completions_logprobs = await completions({ model: "tiny", prompt, max_tokens: 6, logprobs: 5, seed: 3 });
// lm-evaluation-harness local-completions, loglikelihood requests.
report.echo = await completions({ model: "tiny", prompt, max_tokens: 1, logprobs: 1, echo: true, temperature: 0 });
report.chat_logprobs = await chat({ model: "tiny", messages, max_tokens: 8, logprobs: true, top_logprobs: 3, seed: 1 });

const penalties = { presence_penalty: -2, frequency_penalty: -2, repetition_penalty: 1.3 };
report.plain = await completions({ model: "tiny", prompt, max_tokens: 16, temperature: 0, ignore_eos: true });
report.penalised = await completions({ model: "tiny", prompt, max_tokens: 16, temperature: 0, ignore_eos: true, ...penalties });
report.penalised_sampled = await completions({ model: "tiny", prompt, max_tokens: 16, seed: 5, ignore_eos: true, ...penalties });
report.chat_penalised = await chat({ model: "tiny", messages, max_tokens: 12, seed: 7, ...penalties });
report.logit_bias = await completions({ model: "tiny", prompt, max_tokens: 5, logit_bias: { "1234": 100 } });
report.chat_logit_bias = await chat({ model: "tiny", messages, max_tokens: 5, logit_bias: { "1234": 100 } });

const first = report.plain.once.token_ids[0];
report.stop_token_ids = await completions({ model: "tiny", prompt, max_tokens: 8, temperature: 0, stop_token_ids: [first] });
report.min_tokens = await completions({ model: "tiny", prompt, max_tokens: 8, temperature: 0, stop_token_ids: [first], min_tokens: 4 });
// Chat ends at Harmony's <|return|> (200002) unless ignore_eos; the bias makes the model write it every time.
report.chat_return = await chat({ model: "tiny", messages, max_tokens: 4, logit_bias: { "200002": 100 } });
report.chat_ignore_eos = await chat({ model: "tiny", messages, max_tokens: 4, logit_bias: { "200002": 100 }, ignore_eos: true });
report.chat_min_tokens = await chat({ model: "tiny", messages, max_tokens: 6, logit_bias: { "200002": 100 }, min_tokens: 3 });

// Structured outputs: the whole completion is the document; chat constrains its final channel only.
report.schema = {
  type: "object", additionalProperties: false, required: ["name", "age"],
  properties: { name: { type: "string", maxLength: 12 }, age: { type: "integer" },
                tags: { type: "array", items: { enum: ["a", "b"] }, maxItems: 2 } },
};
report.json_schema = await completions({
  model: "tiny", prompt, max_tokens: 200, seed: 4,
  response_format: { type: "json_schema", json_schema: { name: "person", schema: report.schema, strict: true } },
});
report.chat_json_schema_status = (await client.chat.completions.create({
  model: "tiny", messages, max_tokens: 4,
  response_format: { type: "json_schema", json_schema: { name: "person", schema: report.schema, strict: true } },
})).choices[0].finish_reason;

// n choices: each its own derived seed (seed + i), streamed by index.
const nOnce = await client.completions.create({ model: "tiny", prompt, max_tokens: 5, n: 3, seed: 10 });
report.n = { once: nOnce.choices.map((c) => ({ index: c.index, token_ids: c.token_ids })), stream: [[], [], []] };
for await (const chunk of await client.completions.create({ model: "tiny", prompt, max_tokens: 5, n: 3, seed: 10, stream: true }))
  for (const c of chunk.choices) report.n.stream[c.index].push(...(c.token_ids ?? []));
report.n.single = [];
for (let i = 0; i < 3; ++i)
  report.n.single.push((await client.completions.create({ model: "tiny", prompt, max_tokens: 5, seed: 10 + i })).choices[0].token_ids);

// n choices on chat: each its own derived seed (seed + i) and reader, streamed by index.
const chatN = { model: "tiny", messages, max_tokens: 6, n: 3, seed: 20, logprobs: true };
const chatChoice = (c) => ({ content: c.message.content, tokens: c.logprobs.content.map((t) => t.token), finish_reason: c.finish_reason });
const chatNOnce = await client.chat.completions.create(chatN);
report.chat_n = { once: chatNOnce.choices.map((c) => ({ index: c.index, ...chatChoice(c) })), usage: chatNOnce.usage,
                  stream: [0, 1, 2].map(() => ({ content: "", tokens: [], finish_reason: null })), single: [], single_usage: [] };
for await (const chunk of await client.chat.completions.create({ ...chatN, stream: true }))
  for (const c of chunk.choices) {
    const merged = report.chat_n.stream[c.index];
    merged.content += c.delta?.content ?? "";
    merged.tokens.push(...(c.logprobs?.content ?? []).map((t) => t.token));
    if (c.finish_reason) merged.finish_reason = c.finish_reason;
  }
for (let i = 0; i < 3; ++i) {
  const single = await client.chat.completions.create({ ...chatN, n: 1, seed: 20 + i });
  report.chat_n.single.push(chatChoice(single.choices[0]));
  report.chat_n.single_usage.push(single.usage);
}

// A forced tool call (tool_choice naming the tool): the random model's arguments are constrained to its schema.
report.tool_parameters = {
  type: "object", additionalProperties: false, required: ["city", "days"],
  properties: { city: { type: "string", maxLength: 10 }, days: { type: "integer" } },
};
const tools = [
  { type: "function", function: { name: "get_weather", parameters: report.tool_parameters } },
  { type: "function", function: { name: "get_time" } },
];
const forced = { model: "tiny", messages, tools, max_tokens: 120, seed: 8,
                 tool_choice: { type: "function", function: { name: "get_weather" } } };
const call = (await client.chat.completions.create(forced)).choices[0];
report.forced_tool = { once: { finish_reason: call.finish_reason, tool_calls: call.message.tool_calls }, stream: {} };
let args = "", name = null, finish = null;
for await (const chunk of await client.chat.completions.create({ ...forced, stream: true })) {
  const c = chunk.choices[0];
  if (!c) continue;
  for (const t of c.delta?.tool_calls ?? []) {
    name ??= t.function?.name ?? null;
    args += t.function?.arguments ?? "";
  }
  if (c.finish_reason) finish = c.finish_reason;
}
report.forced_tool.stream = { name, arguments: args, finish_reason: finish };

report.errors = {};
const create = {
  chat: (body) => client.chat.completions.create(body),
  completions: (body) => client.completions.create(body),
  responses: (body) => client.responses.create(body),
};
for (const [name, [endpoint, body]] of Object.entries({
  top_logprobs: ["chat", { model: "tiny", messages, logprobs: true, top_logprobs: 21 }],
  presence_penalty: ["chat", { model: "tiny", messages, presence_penalty: 3 }],
  repetition_penalty: ["chat", { model: "tiny", messages, repetition_penalty: 0 }],
  logit_bias: ["chat", { model: "tiny", messages, logit_bias: { "not-a-token": 1 } }],
  min_tokens: ["chat", { model: "tiny", messages, max_tokens: 2, min_tokens: 3 }],
  n: ["responses", { model: "tiny", input: "Hi", n: 2 }],
  // vLLM V1 refuses best_of > 1 too (its engine dropped it).
  best_of: ["completions", { model: "tiny", prompt, max_tokens: 2, best_of: 2 }],
  response_format: ["chat", { model: "tiny", messages, response_format: { type: "json_schema", json_schema: {
    name: "x", schema: { type: "string", pattern: "a+" } } } }],
})) {
  try {
    await create[endpoint](body);
    report.errors[name] = "accepted";
  } catch (e) {
    report.errors[name] = { status: e.status, param: e.param ?? e.error?.param ?? null };
  }
}
console.log(JSON.stringify(report));
