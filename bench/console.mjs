// The web console's performance (issue 24), in Debian's Chromium driven by playwright-core
// against a running svc on the mock provider: run by bench/console.sh, which starts the server.
//
// 1. First load of /ui: bytes transferred (compressed) and the time until the list is
//    interactive (the spawn button and the first page of rows on screen), each load in a fresh
//    browser context (empty cache).
// 2. The live list with SIZE sandboxes, all of them paged in: while sandboxes are spawned and
//    destroyed through the API, the frame intervals and long tasks the page shows, the requests
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

// 2. The live list with every sandbox paged in, under churn.
const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
await page.goto(`${base}/ui`);
await page.getByText("live", { exact: true }).waitFor();
const paging = Date.now();
while ((await page.getByRole("button", { name: /^Load \d+ more$/ }).count()) > 0) {
  await page.getByRole("button", { name: /^Load \d+ more$/ }).click();
  await page.waitForFunction(
    (count) => document.querySelectorAll('[data-testid="sandbox-row"]').length > count,
    await page.locator('[data-testid="sandbox-row"]').count(),
  );
}
const rows = await page.locator('[data-testid="sandbox-row"]').count();
console.log(`paged in ${rows} rows in ${Date.now() - paging} ms`);

const requests = { list: 0, one: 0, other: 0 };
page.on("request", (request) => {
  const path = new URL(request.url()).pathname;
  if (path === "/api/v1/sandboxes") requests.list += 1;
  else if (/^\/api\/v1\/sandboxes\/[^/]+$/.test(path)) requests.one += 1;
  else if (path.startsWith("/api/")) requests.other += 1;
});
await page.evaluate(() => {
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

// Half spawns, half destroys of the listed sandboxes, 16 at a time.
const churnStarted = Date.now();
const victims = ids.splice(0, churn / 2);
const work = [...victims.map((id) => ["DELETE", id]), ...Array.from({ length: churn / 2 }, () => ["POST"])];
work.sort(() => Math.random() - 0.5);
await inParallel(work, 16, async ([method, id]) => {
  if (method === "DELETE") await api("DELETE", `/sandboxes/${id}`);
  else ids.push((await api("POST", "/sandboxes", { ttl: "2h" })).id);
});
const churnTook = Date.now() - churnStarted;
const expected = rows; // as many spawned as destroyed
const settledFrom = Date.now();
await page.waitForFunction(
  ({ expected, gone }) =>
    document.querySelectorAll('[data-testid="sandbox-row"]').length === expected &&
    gone.every((id) => !document.querySelector(`[data-sandbox-id="${id}"]`)),
  { expected, gone: victims },
  { timeout: 30000 },
);
const settled = Date.now() - settledFrom;
const probe = await page.evaluate(() => {
  globalThis.__probe.stopped = true;
  return globalThis.__probe;
});
const frames = probe.frames.slice(1);
console.log(
  `churn: ${churn} changes (${churn / 2} spawns, ${churn / 2} destroys) in ${churnTook} ms over ${rows} rows; ` +
    `list agreed ${settled} ms after the last change`,
);
console.log(
  `frames: ${frames.length}, interval median ${median(frames).toFixed(1)} ms, p99 ${quantile(frames, 0.99).toFixed(1)} ms, ` +
    `max ${Math.max(...frames).toFixed(1)} ms; long tasks: ${probe.longTasks.length}, ` +
    `longest ${Math.max(0, ...probe.longTasks).toFixed(0)} ms`,
);
console.log(
  `requests during the churn: ${requests.list} list pages, ${requests.one} single sandboxes, ${requests.other} other`,
);
await browser.close();
