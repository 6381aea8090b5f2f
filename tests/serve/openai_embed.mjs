// Embeddings through the official openai npm package, run by
// tests/test_serve_scale.c: node openai_embed.mjs BASE_URL MODEL JSON_INPUT
// The package asks for encoding_format "base64" unless told otherwise and
// decodes it; prints {"base64": [[...]], "float": [[...]], "usage": {...}}.
import OpenAI from "openai";

const [base, model, input] = process.argv.slice(2);
const client = new OpenAI({ baseURL: base + "/v1", apiKey: "unused", maxRetries: 0 });
const b = await client.embeddings.create({ model, input: JSON.parse(input) });
const f = await client.embeddings.create({ model, input: JSON.parse(input), encoding_format: "float" });
const vecs = (r) => r.data.sort((x, y) => x.index - y.index).map((d) => Array.from(d.embedding));
process.stdout.write(JSON.stringify({ base64: vecs(b), float: vecs(f), usage: b.usage, object: b.object }));
