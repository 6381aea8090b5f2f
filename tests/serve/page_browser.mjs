// Drives the page of `tutti serve` (GET /) in a real browser: Debian's
// chromium, headless, through puppeteer-core; run by tests/test_serve_scale.c:
//   node page_browser.mjs BASE_URL MODEL PROMPT [SCREENSHOT.png]
// Loads the page, picks MODEL, types PROMPT, presses Enter and waits for the
// streamed reply.  Prints {"options", "members", "reply", "reply_class",
// "units": [{text, title, bar}], "summary", "stats", "errors"}: an
// ensemble's reply is made of units (tokens or characters) whose title gives
// each member's share and whose bar shows them in the members' colours.
import puppeteer from "puppeteer-core";

const [base, model, prompt, shot] = process.argv.slice(2);
const browser = await puppeteer.launch({
  executablePath: process.env.TUTTI_CHROMIUM || "/usr/bin/chromium",
  headless: true,
  // root in a container: no sandbox; no GPU, small /dev/shm
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run"],
});
try {
  const page = await browser.newPage();
  await page.setViewport({ width: 900, height: 640 });
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
  await page.goto(base + "/", { waitUntil: "load" });
  await page.waitForFunction(() => document.querySelectorAll("#model option").length > 0, { timeout: 30000 });
  await page.select("#model", model);
  await page.type("#prompt", prompt);
  await page.keyboard.press("Enter");
  await page.waitForSelector("#log .msg[data-done='1']", { timeout: 60000 });
  const r = await page.evaluate(() => {
    const out = [...document.querySelectorAll("#log .msg")].pop();
    return {
      options: [...document.querySelectorAll("#model option")].map((o) => o.value),
      members: [...document.querySelectorAll("#members .member")].map((m) => [m.textContent, m.style.background]),
      reply: out.textContent, reply_class: out.className,
      units: [...out.querySelectorAll(".unit")].map((u) => ({ text: u.textContent, title: u.title,
                                                                bar: u.style.backgroundImage })),
      summary: out.querySelector(".shares")?.textContent ?? null,
      stats: document.getElementById("stats").textContent,
    };
  });
  r.errors = errors;
  if (shot) await page.screenshot({ path: shot });
  process.stdout.write(JSON.stringify(r));
} finally {
  await browser.close();
}
