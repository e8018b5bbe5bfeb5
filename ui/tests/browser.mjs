// The console in a real browser (Debian's Chromium driven by playwright-core) against a real
// svc server: `node tests/browser.mjs <scenario>`, run by crates/svc/tests/it/browser.rs, which
// starts the server. Each scenario checks what the issue asks of the console through the page
// and through the API, saves a screenshot of what it saw into $SVC_SCREENSHOTS, prints what it
// measured, and exits non-zero with the reason when a check fails.
//
// Environment: SVC_URL (the server, e.g. http://127.0.0.1:8080), SVC_API_KEY (when the server
// has auth enabled), SVC_SCREENSHOTS (a directory), SVC_CHROMIUM (default /usr/bin/chromium).
import { chromium } from "playwright-core";
import { mkdirSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";

const base = process.env.SVC_URL ?? fail("SVC_URL is not set");
const apiKey = process.env.SVC_API_KEY ?? "";
const shots = process.env.SVC_SCREENSHOTS ?? "screenshots";
const scenario = process.argv[2] ?? fail("name a scenario");
mkdirSync(shots, { recursive: true });
const require = createRequire(import.meta.url);
const axeSource = readFileSync(require.resolve("axe-core/axe.min.js"), "utf8");

function fail(message) {
  throw new Error(message);
}

function check(condition, message) {
  if (!condition) fail(message);
}

/** A call to svc's API with the test's credential, answering the parsed JSON body. */
async function api(method, path, body) {
  const headers = apiKey ? { "X-API-Key": apiKey } : {};
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(`${base}/api/v1${path}`, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  check(response.ok, `${method} ${path} answered ${response.status}: ${text}`);
  return text ? JSON.parse(text) : null;
}

/** A browser page on the console, signed in with the test's key when the server wants one. */
async function open(browser, path = "/ui", viewport = { width: 1280, height: 800 }) {
  const page = await browser.newPage({ viewport });
  page.setDefaultTimeout(15000);
  watch(page);
  await page.goto(`${base}${path}`);
  if (apiKey) {
    const form = page.getByTestId("auth-form");
    await form.waitFor();
    await form.getByRole("textbox", { name: "API key" }).fill(apiKey);
    await form.getByRole("button", { name: "Sign in" }).click();
    await form.waitFor({ state: "detached" });
  }
  return page;
}

/** Uncaught errors and anything the content security policy refused, failing the scenario. */
const problems = [];
function watch(page) {
  page.on("pageerror", (error) => problems.push(`uncaught: ${error.message}`));
  page.on("console", (message) => {
    if (message.type() === "error" && /Content Security Policy/i.test(message.text())) {
      problems.push(`refused by the policy: ${message.text()}`);
    }
  });
}

async function screenshot(page, name) {
  await page.screenshot({ path: join(shots, `${name}.png`), fullPage: true });
}

const row = (page, id) => page.locator(`[data-testid="sandbox-row"][data-sandbox-id="${id}"]`);

/**
 * axe-core's WCAG 2 A and AA rules on the page as shown: every control has a name a screen
 * reader can say, text has enough contrast, landmarks and headings make sense.
 */
async function assertAccessible(page, where) {
  // Evaluated through the driver: the page's own policy rightly refuses an injected script tag.
  await page.evaluate(axeSource);
  const violations = await page.evaluate(async () => {
    const result = await globalThis.axe.run(document, {
      runOnly: { type: "tag", values: ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"] },
    });
    return result.violations.map(
      (v) => `${v.id} (${v.impact}): ${v.help} at ${v.nodes.map((n) => n.target.join(" ")).slice(0, 5).join("; ")}`,
    );
  });
  check(violations.length === 0, `${where}: accessibility violations:\n  ${violations.join("\n  ")}`);
}

const scenarios = {
  /** The list shows a sandbox spawned through the API within a second. */
  async list(browser) {
    const started = Date.now();
    const page = await open(browser);
    await page.getByRole("heading", { name: "Sandboxes" }).waitFor();
    await page.getByTestId("spawn").waitFor();
    console.log(`console interactive after ${Date.now() - started} ms`);
    // The list follows the event stream; give it its subscription before the spawn.
    await page.getByText("live", { exact: true }).waitFor();
    const asked = Date.now();
    const sandbox = await api("POST", "/sandboxes", {});
    // A generous wait: a busy machine is slow, not wrong. The one-second budget is enforced
    // only on a run that asks for it (SVC_BROWSER_STRICT_TIMING=1); the time is printed always.
    await row(page, sandbox.id).waitFor({ timeout: 30000 });
    const listedAfter = Date.now() - asked;
    console.log(`sandbox ${sandbox.id} listed ${listedAfter} ms after the spawn was asked`);
    if (process.env.SVC_BROWSER_STRICT_TIMING === "1") {
      check(listedAfter <= 1000, `sandbox ${sandbox.id} listed ${listedAfter} ms after the spawn was asked, over 1000 ms`);
    }
    await assertAccessible(page, "sandbox list");
    await screenshot(page, "sandboxes");
    await page.setViewportSize({ width: 390, height: 844 });
    await assertAccessible(page, "sandbox list on a phone");
    await screenshot(page, "sandboxes-phone");
  },

  /** Spawn and destroy from the UI, each seen through the API. */
  async "spawn-destroy"(browser) {
    const page = await open(browser);
    await page.getByText("live", { exact: true }).waitFor();
    const ids = () =>
      page.$$eval('[data-testid="sandbox-row"]', (rows) => rows.map((r) => r.getAttribute("data-sandbox-id")));
    const before = new Set(await ids());
    // The sandbox Spawn asked for, from the console's own request; then its row.
    const [created] = await Promise.all([
      page.waitForResponse((r) => r.request().method() === "POST" && r.url().endsWith("/api/v1/sandboxes"), {
        timeout: 30000,
      }),
      page.getByTestId("spawn").click(),
    ]);
    check(created.ok(), `Spawn's request answered ${created.status()}`);
    const { id } = await created.json();
    check(id && !before.has(id), `Spawn answered ${id}, not a new sandbox`);
    const spawned = row(page, id);
    await spawned.waitFor({ timeout: 30000 });
    const sandbox = await api("GET", `/sandboxes/${id}`);
    check(["creating", "running"].includes(sandbox.state), `spawned sandbox is ${sandbox.state}`);
    await spawned.getByRole("link", { name: id }).click();
    await page.getByRole("heading", { name: id }).waitFor();
    await page.getByText("running", { exact: true }).first().waitFor();
    await assertAccessible(page, "sandbox page");
    await screenshot(page, "sandbox");
    await page.getByTestId("destroy").click();
    await page.waitForURL(`${base}/ui`);
    await row(page, id).waitFor({ state: "detached" });
    const list = await api("GET", "/sandboxes");
    check(!list.some((s) => s.id === id), `${id} is still listed after the destroy`);
  },

  /** Filters narrow the list as the server would; extend, pause and resume work from a row. */
  async "list-actions"(browser) {
    const first = await api("POST", "/sandboxes", {});
    const second = await api("POST", "/sandboxes", {});
    const page = await open(browser);
    await page.getByText("live", { exact: true }).waitFor();
    await row(page, first.id).getByRole("button", { name: /^Pause/ }).click();
    await row(page, first.id).getByText("paused", { exact: true }).waitFor();
    check((await api("GET", `/sandboxes/${first.id}`)).state === "paused", "the row's Pause did not pause");
    await page.getByRole("combobox", { name: "State" }).selectOption("paused");
    await row(page, second.id).waitFor({ state: "detached" });
    await row(page, first.id).waitFor();
    check((await page.locator('[data-testid="sandbox-row"]').count()) === 1, "the paused filter shows more than the paused sandbox");
    await row(page, first.id).getByRole("button", { name: /^Resume/ }).click();
    // Resumed, it no longer matches the filter and leaves the list.
    await row(page, first.id).waitFor({ state: "detached" });
    check((await api("GET", `/sandboxes/${first.id}`)).state === "running", "the row's Resume did not resume");
    await page.getByRole("combobox", { name: "State" }).selectOption("");
    await row(page, second.id).waitFor();
    // The test server's clock stands still, so the new expiry is the old one: the request is
    // what shows.
    const [extended] = await Promise.all([
      page.waitForResponse((r) => r.url().endsWith(`/sandboxes/${second.id}/extend`)),
      row(page, second.id).getByRole("button", { name: /^Extend 30m/ }).click(),
    ]);
    check(extended.status() === 200, `the row's Extend answered ${extended.status()}`);
    check(JSON.parse(extended.request().postData() ?? "{}").ttl === "30m", "the row's Extend asked for another ttl");
    await page.getByRole("searchbox", { name: "Owner" }).fill("nobody-owns-this");
    await page.getByRole("searchbox", { name: "Owner" }).press("Enter");
    await row(page, second.id).waitFor({ state: "detached" });
    await screenshot(page, "sandboxes-filtered");
  },

  /** One sandbox's exec history with an exec's output, its resource samples and its logs. */
  async "sandbox-details"(browser) {
    const sandbox = await api("POST", "/sandboxes", {});
    const exec = await api("POST", `/sandboxes/${sandbox.id}/exec`, { command: "echo history-marker; echo oops >&2" });
    const page = await open(browser, `/ui/sandboxes/${sandbox.id}`);
    const record = page.locator(`[data-testid="exec-row"][data-exec-id="${exec.exec_id}"]`);
    await record.getByText("exited", { exact: true }).waitFor();
    await record.getByRole("button", { name: /of output from/ }).click();
    const output = page.getByTestId("exec-output");
    await output.filter({ hasText: "history-marker" }).waitFor();
    await output.filter({ hasText: "[exited with 0" }).waitFor();
    // A new exec shows up in the history from its events, without a reload.
    const later = await api("POST", `/sandboxes/${sandbox.id}/exec`, { command: "true" });
    await page.locator(`[data-testid="exec-row"][data-exec-id="${later.exec_id}"]`).waitFor();
    await page.getByText(/^Memory \d/).waitFor();
    await page.getByRole("button", { name: "Refresh logs" }).click();
    await page.getByRole("region", { name: "Log lines" }).filter({ hasText: "history-marker" }).waitFor();
    await assertAccessible(page, "sandbox page with an exec's output");
    await screenshot(page, "sandbox-details");
  },

  /** Past a page of 100 the list pages, following the API's cursor, and stays current. */
  async paging(browser) {
    await Promise.all(Array.from({ length: 8 }, async () => {
      for (let i = 0; i < 13; i += 1) await api("POST", "/sandboxes", {});
    }));
    const page = await open(browser);
    const count = page.getByTestId("sandbox-count");
    await count.filter({ hasText: "1–100 of 100+" }).waitFor();
    check((await page.locator('[data-testid="sandbox-row"]').count()) === 100, "the first page holds other than 100 rows");
    await page.getByRole("button", { name: "Next" }).click();
    await count.filter({ hasText: "101–104 of 104" }).waitFor();
    check(await page.getByRole("button", { name: "Next" }).isDisabled(), "Next is enabled on the last page");
    const oldest = (await api("GET", "/sandboxes?limit=1000")).at(-1);
    await row(page, oldest.id).waitFor();
    await api("POST", "/sandboxes", {});
    await count.filter({ hasText: "101–105 of 105" }).waitFor();
    await api("DELETE", `/sandboxes/${oldest.id}`);
    await count.filter({ hasText: "101–104 of 104" }).waitFor();
    await row(page, oldest.id).waitFor({ state: "detached" });
    await page.getByRole("button", { name: "Previous" }).click();
    await count.filter({ hasText: "1–100 of 104" }).waitFor();
  },

  /** Typing `echo $((6*7))` in the terminal shows 42. */
  async terminal(browser) {
    const sandbox = await api("POST", "/sandboxes", {});
    const page = await open(browser, `/ui/sandboxes/${sandbox.id}`);
    const terminal = page.getByTestId("terminal");
    await terminal.waitFor();
    await page.getByText("connected", { exact: true }).waitFor();
    await terminal.click();
    // The typed line holds no "42": only the command's output can. A line typed before the
    // shell has set up its terminal may be discarded by it (a busy machine starts the shell
    // late), so the line is typed again until its answer shows.
    const answer = terminal.locator(".xterm-rows").getByText(/^\s*42\s*$/).first();
    for (let attempt = 1; ; attempt++) {
      await page.keyboard.type("echo $((6*7))\n");
      try {
        await answer.waitFor({ timeout: 10000 });
        break;
      } catch (error) {
        if (attempt === 6) throw error;
      }
    }
    // No keyboard trap: Shift+Tab leaves the terminal.
    await page.keyboard.press("Shift+Tab");
    const inside = await page.evaluate(() =>
      Boolean(document.activeElement?.closest('[data-testid="terminal"]')),
    );
    check(!inside, "Shift+Tab left the focus in the terminal");
    await assertAccessible(page, "sandbox page with its terminal");
    await screenshot(page, "terminal");
    await page.setViewportSize({ width: 390, height: 844 });
    await assertAccessible(page, "sandbox page on a phone");
    await screenshot(page, "sandbox-phone");
  },

  /** A file uploaded in the browser is read back through the API. */
  async upload(browser) {
    const sandbox = await api("POST", "/sandboxes", {});
    const page = await open(browser, `/ui/sandboxes/${sandbox.id}`);
    const content = `uploaded from the console at ${new Date().toISOString()}\n`;
    await page.getByTestId("file-upload").setInputFiles({
      name: "console-upload.txt",
      mimeType: "text/plain",
      buffer: Buffer.from(content),
    });
    await page.locator('[data-testid="file-row"][data-path="/console-upload.txt"]').waitFor();
    const headers = apiKey ? { "X-API-Key": apiKey } : {};
    const response = await fetch(
      `${base}/api/v1/sandboxes/${sandbox.id}/files?path=${encodeURIComponent("/console-upload.txt")}`,
      { headers },
    );
    check(response.ok, `reading the upload back answered ${response.status}`);
    const read = await response.text();
    check(read === content, `read back ${JSON.stringify(read)}, uploaded ${JSON.stringify(content)}`);
    await assertAccessible(page, "sandbox page with its files");
    await screenshot(page, "files");
  },

  /** The events page shows the recent history, then `sandbox.created` live. */
  async events(browser) {
    const earlier = await api("POST", "/sandboxes", {});
    const page = await open(browser, "/ui/events");
    await page
      .locator(`[data-testid="event-row"][data-event-type="sandbox.created"][data-sandbox-id="${earlier.id}"]`)
      .waitFor();
    await page.getByText("live", { exact: true }).waitFor();
    const sandbox = await api("POST", "/sandboxes", {});
    await page
      .locator(`[data-testid="event-row"][data-event-type="sandbox.created"][data-sandbox-id="${sandbox.id}"]`)
      .waitFor({ timeout: 30000 });
    // Filtered by type, the page shows only that type.
    await page.getByRole("searchbox", { name: "Types (comma-separated)" }).fill("sandbox.destroyed");
    await page.getByRole("searchbox", { name: "Types (comma-separated)" }).press("Enter");
    await page.getByRole("button", { name: "Clear" }).click();
    await page.getByText("live", { exact: true }).waitFor();
    const other = await api("POST", "/sandboxes", {});
    await api("DELETE", `/sandboxes/${other.id}`);
    await page
      .locator(`[data-testid="event-row"][data-event-type="sandbox.destroyed"][data-sandbox-id="${other.id}"]`)
      .waitFor({ timeout: 30000 });
    const shown = await page.$$eval('[data-testid="event-row"]', (rows) => rows.map((r) => r.getAttribute("data-event-type")));
    check(shown.every((type) => type === "sandbox.destroyed"), `the type filter let through ${shown.join(", ")}`);
    await assertAccessible(page, "events page");
    await screenshot(page, "events");
  },

  /** With auth enabled the console asks for a key and refuses a wrong one. */
  async auth(browser) {
    check(apiKey, "the auth scenario needs SVC_API_KEY");
    const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
    page.setDefaultTimeout(15000);
    watch(page);
    await page.goto(`${base}/ui`);
    const form = page.getByTestId("auth-form");
    await form.waitFor();
    await assertAccessible(page, "credential form");
    await form.getByRole("textbox", { name: "API key" }).fill(`${apiKey}-wrong`);
    await form.getByRole("button", { name: "Sign in" }).click();
    await form.getByRole("alert").waitFor();
    await screenshot(page, "auth-refused");
    check(await form.isVisible(), "the form left the screen after a wrong key");
    await form.getByRole("textbox", { name: "API key" }).fill(apiKey);
    await form.getByRole("button", { name: "Sign in" }).click();
    await page.getByRole("heading", { name: "Sandboxes" }).waitFor();
    // Kept for the browser session: a reload does not ask again.
    await page.reload();
    await page.getByRole("heading", { name: "Sandboxes" }).waitFor();
    check((await page.getByTestId("auth-form").count()) === 0, "the console asked again after a reload");
  },

  /** The overview shows the providers, the queue, a quota with its usage and request rates. */
  async overview(browser) {
    await api("POST", "/sandboxes", {});
    const page = await open(browser, "/ui/overview");
    await page.getByRole("heading", { name: "Overview" }).waitFor();
    await page.getByRole("cell", { name: "mock (default)" }).waitFor();
    await page.getByText("Spawn queue").waitFor();
    await page.getByRole("cell", { name: "console-owner" }).waitFor();
    // Rates need two scrapes, five seconds apart.
    await page.getByText(/^Server errors: /).waitFor({ timeout: 30000 });
    await page.getByRole("cell", { name: "GET /api/v1/metrics/scrape" }).waitFor();
    await assertAccessible(page, "overview");
    await screenshot(page, "overview");
  },

  /** A template edited and built from the console, its build log followed until the result. */
  async templates(browser) {
    const name = process.env.SVC_TEMPLATE ?? fail("SVC_TEMPLATE is not set");
    const page = await open(browser, "/ui/templates");
    await page.getByRole("button", { name: `Edit ${name} and its builds` }).click();
    const form = page.getByRole("form", { name: `Edit ${name}` });
    await form.getByLabel("TTL (e.g. 30m)").fill("45m");
    await form.getByRole("button", { name: "Save" }).click();
    await form.getByText(`Saved ${name}.`).waitFor();
    const saved = await api("GET", `/templates/${name}`);
    check(["45m", "45m0s"].includes(saved.ttl), `the template's ttl is ${saved.ttl} after the edit`);
    const marker = `console-${Date.now()}`;
    const dockerfile = page.getByLabel("Dockerfile");
    await dockerfile.fill(`FROM ${saved.image}\nRUN echo ${marker} > /built.txt\n`);
    await page.getByRole("button", { name: "Build", exact: true }).click();
    const log = page.getByTestId("build-log");
    await log.filter({ hasText: /Step \d+: RUN echo/ }).waitFor({ timeout: 60000 });
    await log.filter({ hasText: /Result: succeeded/ }).waitFor({ timeout: 60000 });
    const built = await api("GET", `/templates/${name}`);
    check(built.image.startsWith("svc-templates/"), `the template's image is ${built.image} after the build`);
    await page.locator('[data-testid="build-row"]').getByText("succeeded").waitFor();
    await assertAccessible(page, "templates");
    await screenshot(page, "templates");
  },
};

const run = scenarios[scenario] ?? fail(`no scenario ${scenario}; known: ${Object.keys(scenarios).join(", ")}`);
const browser = await chromium.launch({
  executablePath: process.env.SVC_CHROMIUM ?? "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-dev-shm-usage"],
});
try {
  await run(browser);
  check(problems.length === 0, `the pages reported:\n  ${problems.join("\n  ")}`);
  console.log(`${scenario}: passed`);
} finally {
  await browser.close();
}
