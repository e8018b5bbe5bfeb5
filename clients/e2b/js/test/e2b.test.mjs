// The unmodified e2b npm package (package.json, pinned) against svc's E2B listener, on the mock
// provider and on docker: one `svc serve` per provider with the E2B listener, reached through
// E2B_API_URL and E2B_SANDBOX_URL as a user sets them.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, openSync, readFileSync, rmSync } from "node:fs";
import http from "node:http";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, describe, it } from "node:test";
import { CommandExitError, FileNotFoundError, NotFoundError, Sandbox } from "e2b";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../../..");
const SVC_BIN = process.env.SVC_BIN || path.join(root, "target/debug/svc");
const DOCKER_IMAGE = "svc-test-busybox:latest";
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function freePort() {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

function dockerProblem() {
  return new Promise((resolve) => {
    const request = http.get({ socketPath: "/var/run/docker.sock", path: `/images/${DOCKER_IMAGE}/json`, timeout: 3000 }, (response) => {
      response.resume();
      resolve(response.statusCode === 200 ? undefined : `Docker test image ${DOCKER_IMAGE} is missing`);
    });
    request.on("timeout", () => request.destroy(new Error("timeout")));
    request.on("error", (err) => resolve(`no Docker engine answers (${err.message})`));
  });
}

async function startServer(provider) {
  const dir = mkdtempSync(path.join(os.tmpdir(), `svc-e2b-js-${provider}-`));
  const [port, e2bPort] = [await freePort(), await freePort()];
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("SVC_") && !k.startsWith("E2B_")));
  Object.assign(env, {
    SVC_SERVER__PORT: String(port),
    // Its own egress proxy port: servers of other suites run at the same time.
    SVC_PROVIDERS__DOCKER__EGRESS_PROXY_PORT: String(await freePort()),
    SVC_E2B__ENABLED: "true",
    SVC_E2B__PORT: String(e2bPort),
    SVC_PROVIDERS__MOCK__ROOT_DIR: path.join(dir, "mock"),
  });
  if (provider === "docker") Object.assign(env, { SVC_PROVIDERS__DEFAULT: "docker", SVC_DEFAULTS__IMAGE: DOCKER_IMAGE });
  else env.SVC_PROVIDERS__DOCKER__ENABLED = "false";
  const log = openSync(path.join(dir, "server.log"), "w");
  const child = spawn(SVC_BIN, ["serve"], { cwd: dir, env, stdio: ["ignore", log, log] });
  const api = `http://127.0.0.1:${port}/api/v1`;
  const e2b = `http://127.0.0.1:${e2bPort}`;
  const deadline = Date.now() + 60_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`svc serve exited: ${readFileSync(path.join(dir, "server.log"), "utf8")}`);
    try {
      if ((await fetch(`${e2b}/health`)).status === 204) break;
    } catch {}
    if (Date.now() > deadline) throw new Error("svc serve did not answer within 60 s");
    await sleep(50);
  }
  return {
    e2b,
    async stop() {
      // svc leaves sandboxes running across restarts: the suite ends what it made.
      for (const sandbox of await (await fetch(`${api}/sandboxes`)).json()) {
        await fetch(`${api}/sandboxes/${sandbox.id}`, { method: "DELETE" });
      }
      child.kill("SIGTERM");
      await new Promise((resolve) => (child.exitCode !== null ? resolve() : child.once("exit", resolve)));
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

for (const provider of ["mock", "docker"]) {
  describe(`e2b SDK on ${provider}`, async () => {
    const problem = provider === "docker" ? await dockerProblem() : undefined;
    if (problem) {
      if (process.env.SVC_TEST_REQUIRE_DOCKER === "1") throw new Error(`DOCKER CASES NOT RUN: ${problem}`);
      console.error(`*** DOCKER CASES NOT RUN: ${problem} ***`);
      it.skip(`docker: ${problem}`);
      return;
    }
    let server;
    let opts;
    before(async () => {
      server = await startServer(provider);
      opts = { apiUrl: server.e2b, sandboxUrl: server.e2b, apiKey: "e2b-compat-suite" };
      process.env.E2B_API_URL = server.e2b;
      process.env.E2B_SANDBOX_URL = server.e2b;
      process.env.E2B_API_KEY = "e2b-compat-suite";
    });
    after(async () => server && (await server.stop()));

    it("creates, lists, sets the timeout and kills", async () => {
      const sandbox = await Sandbox.create({ timeoutMs: 120_000, metadata: { case: "js-lifecycle" }, envs: { GREETING: "hi" } });
      assert.match(sandbox.sandboxId, /^sb-/);
      const info = await sandbox.getInfo();
      assert.equal(info.state, "running");
      assert.deepEqual(info.metadata, { case: "js-lifecycle" });
      assert.equal((await sandbox.commands.run("echo $GREETING")).stdout, "hi\n");
      await sandbox.setTimeout(600_000);
      assert.ok((await sandbox.getInfo()).endAt > info.endAt);
      const listed = await Sandbox.list({ query: { metadata: { case: "js-lifecycle" } } }).nextItems();
      assert.deepEqual(listed.map((s) => s.sandboxId), [sandbox.sandboxId]);
      assert.equal(await sandbox.isRunning(), true);
      assert.equal(await sandbox.kill(), true);
      assert.equal(await Sandbox.kill(sandbox.sandboxId), false);
    });

    it("runs commands: callbacks, exit errors, background, connect, stdin, kill", async () => {
      const sandbox = await Sandbox.create();
      try {
        const chunks = [];
        const result = await sandbox.commands.run("echo a; sleep 0.5; echo b", { onStdout: (d) => chunks.push(d) });
        assert.equal(result.stdout, "a\nb\n");
        assert.equal(chunks.join(""), "a\nb\n");
        await assert.rejects(sandbox.commands.run("echo x >&2; exit 4"), (err) => err instanceof CommandExitError && err.exitCode === 4 && err.stderr === "x\n");
        // The command waits for stdin, so it still runs when connect finds it.
        const handle = await sandbox.commands.run("read line; echo done", { background: true, stdin: true });
        const attached = await sandbox.commands.connect(handle.pid);
        await sandbox.commands.sendStdin(handle.pid, "go\n");
        assert.equal((await attached.wait()).stdout, "done\n");
        const reader = await sandbox.commands.run("read line; echo got:$line", { background: true, stdin: true });
        await sandbox.commands.sendStdin(reader.pid, "piped\n");
        assert.equal((await reader.wait()).stdout, "got:piped\n");
        const sleeper = await sandbox.commands.run("sleep 600", { background: true });
        assert.ok((await sandbox.commands.list()).some((p) => p.pid === sleeper.pid));
        assert.equal(await sandbox.commands.kill(sleeper.pid), true);
        await assert.rejects(sleeper.wait(), CommandExitError);
        assert.equal(await sandbox.commands.kill(sleeper.pid), false);
      } finally {
        await sandbox.kill();
      }
    });

    it("moves files and watches a directory", async () => {
      const sandbox = await Sandbox.create();
      try {
        const written = await sandbox.files.write("/tmp/js/hello.txt", "hello from js\n");
        assert.equal(written.path, "/tmp/js/hello.txt");
        assert.equal(await sandbox.files.read("/tmp/js/hello.txt"), "hello from js\n");
        const bytes = new Uint8Array(70_000).map((_, i) => i % 256);
        await sandbox.files.write("/tmp/js/blob.bin", bytes);
        assert.deepEqual(await sandbox.files.read("/tmp/js/blob.bin", { format: "bytes" }), bytes);
        assert.deepEqual((await sandbox.files.list("/tmp/js")).map((e) => e.name).sort(), ["blob.bin", "hello.txt"]);
        assert.equal(await sandbox.files.exists("/tmp/js/hello.txt"), true);
        assert.equal(await sandbox.files.exists("/tmp/js/none"), false);
        assert.equal((await sandbox.files.rename("/tmp/js/hello.txt", "/tmp/js/renamed.txt")).path, "/tmp/js/renamed.txt");
        assert.equal(await sandbox.files.makeDir("/tmp/js/dir/deep"), true);
        assert.equal(await sandbox.files.makeDir("/tmp/js/dir/deep"), false);
        await sandbox.files.remove("/tmp/js/renamed.txt");
        await assert.rejects(sandbox.files.read("/tmp/js/renamed.txt"), FileNotFoundError);
        const events = [];
        const watch = await sandbox.files.watchDir("/tmp/js", (event) => events.push(`${event.type}:${event.name}`));
        await sandbox.files.write("/tmp/js/watched.txt", "w");
        const deadline = Date.now() + 10_000;
        while (!events.includes("create:watched.txt")) {
          assert.ok(Date.now() < deadline, `events: ${events}`);
          await sleep(100);
        }
        await watch.stop();
      } finally {
        await sandbox.kill();
      }
    });

    it("pauses and resumes, and raises the SDK's errors for an unknown sandbox", async () => {
      const sandbox = await Sandbox.create();
      await sandbox.files.write("/tmp/state.txt", "kept");
      assert.equal(await sandbox.pause(), true);
      assert.equal((await sandbox.getInfo()).state, "paused");
      assert.equal(await Sandbox.pause(sandbox.sandboxId), false);
      const resumed = await Sandbox.connect(sandbox.sandboxId);
      assert.equal((await resumed.getInfo()).state, "running");
      assert.equal(await resumed.files.read("/tmp/state.txt"), "kept");
      await resumed.kill();
      await assert.rejects(Sandbox.connect("sb-0000000000000000"), NotFoundError);
      await assert.rejects(Sandbox.getInfo("sb-0000000000000000"), NotFoundError);
      assert.equal(await Sandbox.kill("sb-0000000000000000"), false);
    });
  });
}
