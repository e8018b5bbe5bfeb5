// The web console's performance (issue 24), in Debian's Chromium driven by playwright-core
// against a running svc on the mock provider: run by bench/console.sh, which starts the server.
//
// 1. First load of /ui: bytes transferred (compressed) and the time until the list is
//    interactive (the spawn button and the first page of rows on screen), each load in a fresh
//    browser context (empty cache).
// 2. The live list with SIZE sandboxes, all of them paged in: against the same page idle, while
//    sandboxes are spawned and destroyed through the API, the frame intervals and long tasks
//    the page shows, the requests
//    it makes (a refetch of the whole list would show as list requests), and how long after the
//    last change the list agrees with the server.
//
// Environment: SVC_URL, SVC_CHROMIUM (default /usr/bin/chromium). Usage: node bench/console.mjs
// [SIZE] [LOADS] [CHURN]
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

// playwright-core is one of the console's own packages (ui/node_modules).
const require = createRequire(fileURLToPath(new URL("../ui/package.json", import.meta.url)));
const { chromium } = require("playwright-core");

const base = process.env.SVC_URL ?? "http://127.0.0.1:17496";
const size = Number(process.argv[2] ?? 1000);
const loads = Number(process.argv[3] ?? 5);
const churn = Number(process.argv[4] ?? 200);

const median = (values) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)];
};
const quantile = (values, q) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * q))];
};

async function api(method, path, body) {
  const response = await fetch(`${base}/api/v1${path}`, {
    method,
    headers: body === undefined ? {} : { "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (!response.ok) throw new Error(`${method} ${path}: ${response.status} ${await response.text()}`);
  return response.json();
}

/** Runs `work` over `items`, `width` at a time. */
async function inParallel(items, width, work) {
  let next = 0;
  await Promise.all(
    Array.from({ length: width }, async () => {
      while (next < items.length) await work(items[next++]);
    }),
  );
}

const browser = await chromium.launch({
  executablePath: process.env.SVC_CHROMIUM ?? "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-dev-shm-usage"],
});

// The server holds SIZE sandboxes before the first load, so every load shows a full first page.
const ids = [];
await inParallel([...Array(size).keys()], 16, async () => {
  ids.push((await api("POST", "/sandboxes", { ttl: "2h" })).id);
});
console.log(`spawned ${ids.length} sandboxes`);

// 1. First loads.
const times = [];
const transferred = [];
for (let i = 0; i < loads; i += 1) {
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  const page = await context.newPage();
  const started = Date.now();
  await page.goto(`${base}/ui`);
  await page.waitForFunction(
    () =>
      document.querySelectorAll('[data-testid="sandbox-row"]').length >= 100 &&
      !document.querySelector('[data-testid="spawn"]')?.hasAttribute("disabled"),
  );
  times.push(Date.now() - started);
  const bytes = await page.evaluate(() =>
    performance
      .getEntriesByType("navigation")
      .concat(performance.getEntriesByType("resource").filter((entry) => entry.name.includes("/ui/")))
      .reduce((sum, entry) => sum + entry.transferSize, 0),
  );
  transferred.push(bytes);
  await context.close();
}
console.log(
  `first load: ${(median(transferred) / 1024).toFixed(1)} KiB transferred (console files, compressed); ` +
    `interactive with a page of 100 rows after ${median(times)} ms (median of ${loads}; ${times.join(", ")} ms)`,
);

// 2. The live list with every sandbox paged in (the first page on screen), under churn.
const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
await page.goto(`${base}/ui`);
await page.getByText("live", { exact: true }).waitFor();
await page.waitForFunction(() => document.querySelectorAll('[data-testid="sandbox-row"]').length >= 100);
const paging = Date.now();
const loaded = () => page.getByTestId("sandbox-count").getAttribute("data-loaded").then(Number);
const next = page.getByRole("button", { name: "Next" });
while (await next.isEnabled()) {
  const before = await page.getByTestId("sandbox-count").textContent();
  await next.click();
  await page.waitForFunction((text) => document.querySelector('[data-testid="sandbox-count"]').textContent !== text, before);
}
const rows = await loaded();
console.log(`paged through ${rows} sandboxes in ${Date.now() - paging} ms`);
const previous = page.getByRole("button", { name: "Previous" });
while (await previous.isEnabled()) await previous.click();

const requests = { list: 0, one: 0, other: 0 };
page.on("request", (request) => {
  const path = new URL(request.url()).pathname;
  if (path === "/api/v1/sandboxes") requests.list += 1;
  else if (/^\/api\/v1\/sandboxes\/[^/]+$/.test(path)) requests.one += 1;
  else if (path.startsWith("/api/")) requests.other += 1;
});
/** Frame intervals and long tasks from now until `stop()`. */
const startProbe = () =>
  page.evaluate(() => {
  const probe = { frames: [], longTasks: [] };
  globalThis.__probe = probe;
  let last = performance.now();
  const frame = (now) => {
    probe.frames.push(now - last);
    last = now;
    if (!probe.stopped) requestAnimationFrame(frame);
  };
  requestAnimationFrame(frame);
  new PerformanceObserver((list) => {
    for (const entry of list.getEntries()) probe.longTasks.push(entry.duration);
  }).observe({ type: "longtask", buffered: false });
});
const stopProbe = async () => {
  const probe = await page.evaluate(() => {
    globalThis.__probe.stopped = true;
    return globalThis.__probe;
  });
  const frames = probe.frames.slice(1);
  return (
    `frames ${frames.length}, interval median ${median(frames).toFixed(1)} ms, p99 ${quantile(frames, 0.99).toFixed(1)} ms, ` +
    `max ${Math.max(...frames).toFixed(1)} ms; long tasks ${probe.longTasks.length}, longest ${Math.max(0, ...probe.longTasks).toFixed(0)} ms`
  );
};

// The baseline: the same page, idle, for as long as the churn lasts.
const pace = Number(process.env.CHURN_SECONDS ?? 5);
await startProbe();
await page.waitForTimeout(pace * 1000);
console.log(`idle (baseline, ${pace} s): ${await stopProbe()}`);
await startProbe();

// Half spawns, half destroys of the listed sandboxes, spread evenly over CHURN_SECONDS.
const churnStarted = Date.now();
const victims = ids.splice(0, churn / 2);
const work = [...victims.map((id) => ["DELETE", id]), ...Array.from({ length: churn / 2 }, () => ["POST"])];
work.sort(() => Math.random() - 0.5);
await Promise.all(
  work.map(async ([method, id], i) => {
    await new Promise((resolve) => setTimeout(resolve, (i * pace * 1000) / work.length));
    if (method === "DELETE") await api("DELETE", `/sandboxes/${id}`);
    else ids.push((await api("POST", "/sandboxes", { ttl: "2h" })).id);
  }),
);
const churnTook = Date.now() - churnStarted;
// As many spawned as destroyed; the page shown (the first) holds the API's first page.
const settledFrom = Date.now();
const newest = (await api("GET", "/sandboxes?limit=100")).map((s) => s.id);
await page.waitForFunction(
  ({ expected, newest }) =>
    Number(document.querySelector('[data-testid="sandbox-count"]').getAttribute("data-loaded")) === expected &&
    [...document.querySelectorAll('[data-testid="sandbox-row"]')].map((r) => r.getAttribute("data-sandbox-id")).join() ===
      newest.join(),
  { expected: rows, newest },
  { timeout: 30000 },
);
const settled = Date.now() - settledFrom;
console.log(`churn: ${await stopProbe()}`);
console.log(
  `churn: ${churn} changes (${churn / 2} spawns, ${churn / 2} destroys) in ${churnTook} ms over ${rows} rows; ` +
    `list agreed ${settled} ms after the last change`,
);
console.log(
  `requests during the churn: ${requests.list} list pages, ${requests.one} single sandboxes, ${requests.other} other`,
);
await browser.close();
