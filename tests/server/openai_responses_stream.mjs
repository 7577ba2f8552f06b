// The Responses API stream and model lookup through the official openai npm client, unchanged
// (tests/server/surface_test.cc starts the server with a scripted Harmony reply and checks the report this prints).
// Usage: node openai_responses_stream.mjs PORT
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, "../../tools/node/package.json"));
const { OpenAI, NotFoundError } = require("openai");

const port = process.argv[2];
const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: "unused", maxRetries: 0 });
const report = {};

// What the client rebuilt from the events, and the events as they came.
async function streamed(params) {
  const stream = client.responses.stream(params);
  const events = [];
  stream.on("event", (e) => events.push({
    type: e.type,
    sequence_number: e.sequence_number,
    status: e.response?.status,
    incomplete_details: e.response?.incomplete_details,
  }));
  let text = "";
  stream.on("response.output_text.delta", (e) => { text += e.delta; });
  const response = await stream.finalResponse();
  return {
    id: response.id,
    status: response.status,
    incomplete_details: response.incomplete_details,
    output: response.output.map((item) => ({
      type: item.type,
      status: item.status,
      text: item.type === "message" ? item.content.map((c) => c.text).join("")
        : item.type === "reasoning" ? (item.content ?? []).map((c) => c.text).join("") : undefined,
      name: item.name,
      arguments: item.arguments,
    })),
    usage: response.usage,
    events,
    deltas: text,
  };
}

report.answer = await streamed({ model: "tiny", input: "Hi", reasoning: { effort: "low" } });
report.cut_off = await streamed({ model: "tiny", input: "Hi", max_output_tokens: 18 });
report.tool = await streamed({
  model: "tiny",
  input: "Weather in Paris?",
  tools: [{
    type: "function",
    name: "get_weather",
    description: "Weather in a city",
    parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
  }],
});

// The next turn continues the stored first one.
const followup = await client.responses.create({ model: "tiny", input: "Go on.", previous_response_id: report.answer.id });
report.followup = { output_text: followup.output_text };
const stored = await client.responses.retrieve(report.answer.id);
report.stored = { id: stored.id, output_text: stored.output_text };

const model = await client.models.retrieve("tiny");
report.model = { id: model.id, object: model.object };
try {
  await client.models.retrieve("no-such-model");
  report.unknown_model = "found";
} catch (e) {
  report.unknown_model = { not_found: e instanceof NotFoundError, status: e.status, error: e.error };
}

// Structured outputs: text.format constrains the final channel. The scripted JSON answer passes and parses; the
// YAML one is stopped by the grammar (a failed generation: the scripted runner writes it regardless of the mask).
const format = {
  type: "json_schema", name: "weather", strict: true,
  schema: { type: "object", additionalProperties: false, required: ["city", "sunny"],
            properties: { city: { type: "string" }, sunny: { type: "boolean" } } },
};
const parsed = await client.responses.parse({ model: "tiny", input: "Weather as JSON", text: { format } });
report.text_format = { status: parsed.status, output_text: parsed.output_text, parsed: parsed.output_parsed };
try {
  await client.responses.create({ model: "tiny", input: "Weather as YAML", text: { format } });
  report.text_format_broken = "accepted";
} catch (e) {
  report.text_format_broken = { status: e.status, message: e.message };
}

console.log(JSON.stringify(report));
