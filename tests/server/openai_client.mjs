// Drives moeserve's server with the official openai npm client, unchanged (tests/server/server_test.cc starts the
// server and checks the report this prints). Usage: node openai_client.mjs PORT
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, "../../tools/node/package.json"));
const { OpenAI } = require("openai");

const port = process.argv[2];
const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: "unused", maxRetries: 0 });
const report = {};

const models = await client.models.list();
report.models = models.data.map((m) => m.id);

const messages = [
  { role: "system", content: "Be brief." },
  { role: "user", content: "Hi" },
];
const chat = await client.chat.completions.create({ model: "tiny", messages, reasoning_effort: "low" });
report.chat = {
  content: chat.choices[0].message.content,
  reasoning_content: chat.choices[0].message.reasoning_content,
  finish_reason: chat.choices[0].finish_reason,
};

const stream = await client.chat.completions.create({
  model: "tiny", messages, stream: true, stream_options: { include_usage: true },
});
let content = "", reasoning = "", usage = null;
for await (const chunk of stream) {
  if (chunk.usage) usage = chunk.usage;
  const delta = chunk.choices[0]?.delta ?? {};
  content += delta.content ?? "";
  reasoning += delta.reasoning_content ?? "";
}
report.chat_stream = { content, reasoning_content: reasoning, usage };

const tools = [{
  type: "function",
  function: {
    name: "get_weather",
    description: "Weather in a city",
    parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
  },
}];
const history = [{ role: "user", content: "Weather in Paris?" }];
const call = await client.chat.completions.create({ model: "tiny", messages: history, tools });
const toolCall = call.choices[0].message.tool_calls[0];
history.push(call.choices[0].message);
history.push({ role: "tool", tool_call_id: toolCall.id, content: JSON.stringify({ sky: "clear" }) });
const answer = await client.chat.completions.create({ model: "tiny", messages: history, tools });
report.tool = {
  finish_reason: call.choices[0].finish_reason,
  name: toolCall.function.name,
  arguments: toolCall.function.arguments,
  answer: answer.choices[0].message.content,
};

const completion = await client.completions.create({ model: "tiny", prompt: [1, 2, 3], max_tokens: 10 });
report.completions = { token_ids: completion.choices[0].token_ids, text: completion.choices[0].text };

const response = await client.responses.create({ model: "tiny", input: "Hi", reasoning: { effort: "low" } });
report.responses = { output_text: response.output_text, status: response.status };

console.log(JSON.stringify(report));
