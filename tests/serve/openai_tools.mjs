// Tool calls through the official openai npm package, run by
// tests/test_serve_scale.c: node openai_tools.mjs BASE_URL MODEL
// Prints {"cases": [{"what", "finish", "calls": [{"name", "arguments"}], "content"}], "continued": {...}}:
// tool_choice "required" plain and streamed (the deltas put together by
// index), a named function, "auto", "required" with parallel calls, and a
// conversation that goes on after a tool message.
import OpenAI from "openai";

const [base, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL: base + "/v1", apiKey: "unused", maxRetries: 0 });
const tools = [
  { type: "function", function: { name: "get_weather", description: "Weather of a city",
    parameters: { type: "object", properties: { city: { type: "string", enum: ["Paris", "Rome", "Oslo"] },
                                                days: { type: "integer", minimum: 1, maximum: 7 } },
                  required: ["city", "days"] } } },
  { type: "function", function: { name: "get_time", description: "Time in a zone",
    parameters: { type: "object", properties: { zone: { type: "string", maxLength: 12 } }, required: ["zone"] } } },
];
const messages = [{ role: "user", content: "What is the weather in Paris?" }];
const common = { model, messages, tools, max_tokens: 400, seed: 3, parallel_tool_calls: false };
const out = { cases: [] };
const plain = (what, r) => {
  const m = r.choices[0].message;
  out.cases.push({ what, finish: r.choices[0].finish_reason, content: m.content,
                   calls: (m.tool_calls ?? []).map((c) => ({ id: c.id, type: c.type, name: c.function.name,
                                                            arguments: c.function.arguments })) });
  return m;
};

const first = plain("required", await client.chat.completions.create({ ...common, tool_choice: "required" }));
plain("named", await client.chat.completions.create({ ...common,
  tool_choice: { type: "function", function: { name: "get_weather" } } }));
plain("auto", await client.chat.completions.create({ ...common, tool_choice: "auto", max_tokens: 40 }));
plain("parallel", await client.chat.completions.create({ ...common, tool_choice: "required", max_tokens: 400,
                                                          parallel_tool_calls: true }));

// streamed: the deltas of each call index concatenated, as the package's users do
const calls = [];
let finish = null, content = "";
for await (const ch of await client.chat.completions.create({ ...common, tool_choice: "required", stream: true })) {
  const d = ch.choices[0]?.delta ?? {};
  content += d.content ?? "";
  for (const tc of d.tool_calls ?? []) {
    calls[tc.index] ??= { id: "", type: "", name: "", arguments: "" };
    if (tc.id) calls[tc.index].id += tc.id;
    if (tc.type) calls[tc.index].type = tc.type;
    calls[tc.index].name += tc.function?.name ?? "";
    calls[tc.index].arguments += tc.function?.arguments ?? "";
  }
  if (ch.choices[0]?.finish_reason) finish = ch.choices[0].finish_reason;
}
out.cases.push({ what: "stream", finish, content: content || null, calls });

// the conversation goes on with the call and its result
const tc = first.tool_calls[0];
const next = await client.chat.completions.create({ model, tools, max_tokens: 12, seed: 3, messages: [
  ...messages, { role: "assistant", content: null, tool_calls: [tc] },
  { role: "tool", tool_call_id: tc.id, content: "22 C and sunny" }] });
out.continued = { finish: next.choices[0].finish_reason, content: next.choices[0].message.content,
                  calls: next.choices[0].message.tool_calls ?? [] };
process.stdout.write(JSON.stringify(out));
