// The repository README's TypeScript example runs as written, against a mock-only test server.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { after, it } from "node:test";
import { promisify } from "node:util";
import { startServer } from "./helpers.js";

const packageRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..");
const server = await startServer({ mockOnly: true });
after(() => server.stop());

it("runs the repository README's example as written", async () => {
  const readme = readFileSync(path.resolve(packageRoot, "../../README.md"), "utf8");
  const match = /### From TypeScript[\s\S]*?```js\n([\s\S]*?)```/.exec(readme);
  assert.ok(match, "the README has no TypeScript example");
  const code = match[1]!;
  assert.ok(code.trim().split("\n").length <= 12, "the example is longer than ten lines or so");
  // Inside the package, so that `import "svc-sdk"` resolves to this build.
  const dir = mkdtempSync(path.join(packageRoot, ".readme-"));
  try {
    const file = path.join(dir, "example.mjs");
    writeFileSync(file, code);
    const { stdout } = await promisify(execFile)(process.execPath, [file], {
      env: { ...process.env, SVC_URL: server.url },
      timeout: 60_000,
    });
    assert.deepEqual(stdout.split(/\s+/).filter(Boolean), ["hi", "1", "2", "3", "0", "hello"]);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
