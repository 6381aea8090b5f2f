// Client test of a pipeline served by `tutti serve`, with the official openai
// npm package, run by tests/test_pipeline.c:
//   node pipeline_client.mjs BASE_URL MODEL PROMPT
// Prints one JSON object: the completion's and the chat completion's text,
// plain and streamed, and how many steps the completion's usage lists.
import OpenAI from "openai";

const [base, model, prompt] = process.argv.slice(2);
const client = new OpenAI({ baseURL: base + "/v1", apiKey: "unused", maxRetries: 0 });
const out = {};

const c = await client.completions.create({ model, prompt });
out.completion = c.choices[0].text;
out.completion_steps = c.usage?.tutti?.steps?.length ?? null;

let s = "";
for await (const ch of await client.completions.create({ model, prompt, stream: true })) s += ch.choices[0]?.text ?? "";
out.completion_stream = s;

const messages = [{ role: "user", content: prompt }];
const r = await client.chat.completions.create({ model, messages });
out.chat = r.choices[0].message.content;

let t = "";
for await (const ch of await client.chat.completions.create({ model, messages, stream: true }))
  t += ch.choices[0]?.delta?.content ?? "";
out.chat_stream = t;

console.log(JSON.stringify(out));
