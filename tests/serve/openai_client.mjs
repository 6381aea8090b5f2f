// Client test of `tutti serve` with the official openai npm package, run by
// tests/test_serve.c: node openai_client.mjs BASE_URL MODEL PROMPT MAX_TOKENS SEED
// Prints one JSON object: the completion's text (plain and streamed) and a
// chat completion's text (plain and streamed), with the finish reasons, and
// a chat completion's and a completion's logprobs (plain and streamed).
import OpenAI from "openai";

const [base, model, prompt, maxTokens, seed] = process.argv.slice(2);
const client = new OpenAI({ baseURL: base + "/v1", apiKey: "unused", maxRetries: 0 });
const common = { model, max_tokens: Number(maxTokens), seed: Number(seed) };
const out = {};

const c = await client.completions.create({ ...common, prompt });
out.completion = c.choices[0].text;
out.completion_finish = c.choices[0].finish_reason;
out.completion_usage = c.usage;

let s = "", sf = null, n = 0;
for await (const ch of await client.completions.create({ ...common, prompt, stream: true })) {
  s += ch.choices[0]?.text ?? "";
  if (ch.choices[0]?.finish_reason) sf = ch.choices[0].finish_reason;
  n++;
}
out.completion_stream = s;
out.completion_stream_finish = sf;
out.completion_stream_chunks = n;

const messages = [{ role: "user", content: prompt }];
const r = await client.chat.completions.create({ ...common, messages });
out.chat = r.choices[0].message.content;
out.chat_role = r.choices[0].message.role;
out.chat_finish = r.choices[0].finish_reason;

let t = "", tf = null;
for await (const ch of await client.chat.completions.create({ ...common, messages, stream: true })) {
  t += ch.choices[0]?.delta?.content ?? "";
  if (ch.choices[0]?.finish_reason) tf = ch.choices[0].finish_reason;
}
out.chat_stream = t;
out.chat_stream_finish = tf;

// logprobs of the fused distribution, plain and streamed
const lpReq = { ...common, messages, logprobs: true, top_logprobs: 3 };
const l = await client.chat.completions.create(lpReq);
out.lp_text = l.choices[0].message.content;
out.lp_content = l.choices[0].logprobs?.content ?? null;
let lt = "";
const lc = [];
for await (const ch of await client.chat.completions.create({ ...lpReq, stream: true })) {
  lt += ch.choices[0]?.delta?.content ?? "";
  lc.push(...(ch.choices[0]?.logprobs?.content ?? []));
}
out.lp_stream_text = lt;
out.lp_stream_content = lc;
const cl = await client.completions.create({ ...common, prompt, logprobs: 2 });
out.completion_lp_text = cl.choices[0].text;
out.completion_lp_tokens = cl.choices[0].logprobs?.tokens ?? null;

// errors come back as the package's APIError with OpenAI's error object
try {
  await client.completions.create({ ...common, model: "no-such-model", prompt });
  out.error_status = 0;
} catch (e) {
  out.error_status = e.status;
  out.error_code = e.code ?? null;
}
process.stdout.write(JSON.stringify(out));
