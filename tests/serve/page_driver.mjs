// Drives the page of `tutti serve` (GET /) without a browser, run by
// tests/test_serve_scale.c: node page_driver.mjs BASE_URL MODEL PROMPT
// Loads the page, runs its inline script against a minimal DOM (the
// elements and events the script uses) with Node's fetch pointed at the
// server, picks MODEL, types PROMPT, sends it and waits for the streamed
// reply.  Prints {"options", "members", "user", "reply", "reply_class",
// "stats"}.  (page_browser.mjs drives the same page in a real browser.)
const [base, model, prompt] = process.argv.slice(2);
const html = await (await fetch(base + "/")).text();
const script = html.match(/<script>([\s\S]*?)<\/script>/)[1];

class El {
  constructor(tag, id) { this.tagName = tag; this.id = id || ""; this.children = []; this.listeners = {};
                         this._text = ""; this.value = ""; this.className = ""; this.style = {}; this.dataset = {};
                         this.disabled = false; }
  get textContent() { return this._text + this.children.map((c) => c.textContent).join(""); }
  set textContent(t) { this._text = String(t); this.children = []; }
  appendChild(c) { this.children.push(c); if (this.tagName === "select" && !this.value) this.value = c.value; return c; }
  addEventListener(k, f) { (this.listeners[k] ??= []).push(f); }
  dispatch(k, ev = {}) { for (const f of this.listeners[k] ?? []) f({ preventDefault() {}, ...ev }); }
  requestSubmit() { this.dispatch("submit"); }
  removeAttribute(a) { if (a === "id") this.id = ""; }
  scrollIntoView() {}
}
const ids = {};
for (const [id, tag] of [["model", "select"], ["max", "input"], ["members", "div"], ["log", "div"], ["form", "form"],
                         ["prompt", "textarea"], ["send", "button"], ["stats", "div"]])
  ids[id] = new El(tag, id);
ids.max.value = "24";
globalThis.document = { getElementById: (id) => ids[id], createElement: (tag) => new El(tag),
                        createTextNode: (t) => { const e = new El("#text"); e._text = String(t); return e; } };
const realFetch = globalThis.fetch;
globalThis.fetch = (url, opts) => realFetch(base + url, opts);
new Function(script)();

const until = async (ok, what) => {
  for (let i = 0; i < 600; i++) { if (ok()) return; await new Promise((r) => setTimeout(r, 50)); }
  throw new Error("timed out waiting for " + what);
};
await until(() => ids.model.children.length > 0, "the model list");
ids.model.value = model;
ids.model.dispatch("change");
ids.prompt.value = prompt;
ids.prompt.dispatch("keydown", { key: "Enter", shiftKey: false });
await until(() => ids.log.children.length === 2 && ids.log.children[1].dataset.done, "the reply");
process.stdout.write(JSON.stringify({
  options: ids.model.children.map((o) => o.value),
  members: ids.members.children.map((m) => [m.textContent, m.style.background ?? null]),
  user: ids.log.children[0].textContent, reply: ids.log.children[1].textContent,
  reply_class: ids.log.children[1].className, stats: ids.stats.textContent,
}));
