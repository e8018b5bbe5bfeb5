import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import net from "node:net";
import { after, before, it } from "node:test";
import { ConflictError, NotFoundError, Sandbox, ResourceLimitError, SvcClient, type CommandHandle, type CommandResult } from "svc-sdk";
import { eachProvider, spawnOptions, suiteServer, waitFor } from "./helpers.js";

const server = await suiteServer();

/** A TCP proxy to the server whose connections can be cut, to break streams mid-way. */
async function cuttableProxy(target: URL): Promise<{ url: string; cut(): void; close(): Promise<void> }> {
  const sockets = new Set<net.Socket>();
  const proxy = net.createServer((client) => {
    const upstream = net.connect(Number(target.port), target.hostname);
    for (const socket of [client, upstream]) {
      sockets.add(socket);
      socket.on("close", () => sockets.delete(socket));
      socket.on("error", () => undefined);
    }
    client.pipe(upstream).pipe(client);
  });
  await new Promise<void>((resolve) => proxy.listen(0, "127.0.0.1", resolve));
  const address = proxy.address() as net.AddressInfo;
  return {
    url: `http://127.0.0.1:${address.port}`,
    cut: () => sockets.forEach((socket) => socket.destroy()),
    close: () => new Promise<void>((resolve) => {
      sockets.forEach((socket) => socket.destroy());
      proxy.close(() => resolve());
    }),
  };
}

eachProvider(server, "commands", (provider) => {
  let sandbox: Sandbox;
  before(async () => {
    sandbox = await Sandbox.create(spawnOptions(provider, { env: { SPAWN_VAR: "from-spawn" } }));
  });
  after(async () => {
    await sandbox?.destroy();
  });

  it("runs a buffered command", async () => {
    const result = await sandbox.commands.run("echo out; echo err >&2; exit 3");
    assert.equal(result.stdout, "out\n");
    assert.equal(result.stderr, "err\n");
    assert.equal(result.exitCode, 3);
    assert.equal(result.timedOut, false);
    assert.match(result.execId, /^ex-[0-9a-f]{16}$/);
    assert.ok(result.duration.length > 0);
  });

  it("passes args without a shell, env, workdir and the spawn env", async () => {
    const direct = await sandbox.commands.run("echo", { args: ["$HOME", "a b"] });
    assert.equal(direct.stdout, "$HOME a b\n");
    await sandbox.files.write("/work/dir/marker", "x");
    const result = await sandbox.commands.run('echo "$MY_VAR $SPAWN_VAR"; ls', { env: { MY_VAR: "mine" }, workdir: "/work/dir" });
    assert.equal(result.stdout, "mine from-spawn\nmarker\n");
  });

  it("kills a command at its deadline (exit 124, timedOut)", async () => {
    const result = await sandbox.commands.run("echo started; sleep 60", { timeout: "3s" });
    assert.equal(result.exitCode, 124);
    assert.equal(result.timedOut, true);
    assert.equal(result.stdout, "started\n");
  });

  it("refuses a timeout over the maximum with ResourceLimitError", async () => {
    await assert.rejects(sandbox.commands.run("true", { timeout: "48h" }), ResourceLimitError);
  });

  it("streams output to callbacks before the command ends", async () => {
    // "b" waits for a gate file that is made only once "a" has arrived: so "a" must have been
    // streamed while the command still ran (it cannot end before the gate exists).
    const gate = `/tmp/gate-${randomUUID()}`;
    const seen: string[] = [];
    const errs: string[] = [];
    const opened: Promise<CommandResult>[] = [];
    const result = await sandbox.commands.run(`echo a; while [ ! -e ${gate} ]; do sleep 0.05; done; rm -f ${gate}; echo b; echo e >&2`, {
      timeout: 60,
      onStdout: (data) => {
        seen.push(data);
        if (opened.length === 0 && seen.join("").includes("a\n")) {
          seen.push("<gate>");
          const touch = sandbox.commands.run(`touch ${gate}`);
          touch.catch(() => undefined); // awaited below
          opened.push(touch);
        }
      },
      onStderr: (data) => errs.push(data),
    });
    const [touch] = opened;
    assert.ok(touch, "onStdout was called with a");
    assert.equal((await touch).exitCode, 0);
    assert.equal(result.exitCode, 0);
    assert.equal(result.stdout, "a\nb\n");
    assert.equal(errs.join(""), "e\n");
    const at = seen.indexOf("<gate>");
    assert.deepEqual([seen.slice(0, at).join(""), seen.slice(at + 1).join("")], ["a\n", "b\n"], JSON.stringify(seen));
    assert.match(result.execId, /^ex-/);
  });

  it("reports a streamed timeout", async () => {
    const result = await sandbox.commands.run("sleep 5", { timeout: 0.4, stream: true });
    assert.equal(result.exitCode, 124);
    assert.equal(result.timedOut, true);
    assert.match(result.stderr, /timed out/);
  });

  it("runs in the background and waits", async () => {
    const handle = await sandbox.commands.run("echo one; sleep 0.3; echo two >&2; exit 7", { background: true });
    assert.match(handle.execId, /^ex-/);
    const result = await handle.wait();
    assert.equal(result.exitCode, 7);
    assert.equal(result.stdout, "one\n");
    assert.equal(result.stderr, "two\n");
    const record = await handle.info();
    assert.equal(record.status, "exited");
    assert.equal(record.background, true);
    assert.equal(record.exit_code, 7);
  });

  it("sends stdin to a background command", async () => {
    const handle = await sandbox.commands.run("read line; echo got:$line; cat", { background: true });
    await handle.sendStdin("hello\n");
    await handle.sendStdin("more\n");
    await handle.closeStdin();
    const result = await handle.wait();
    assert.equal(result.stdout, "got:hello\nmore\n");
    assert.equal(result.exitCode, 0);
  });

  it("kills a background command", async () => {
    const lines: string[] = [];
    const handle = await sandbox.commands.run("echo ready; sleep 30", { background: true, onStdout: (d) => lines.push(d) });
    await waitFor("ready", () => (lines.join("").includes("ready") ? true : undefined));
    assert.deepEqual(await handle.kill(), { status: "killed" });
    await handle.wait();
    assert.equal((await handle.info()).status, "killed");
    await assert.rejects(handle.kill(), ConflictError);
  });

  it("signals a background command (exit 128+N)", async () => {
    const lines: string[] = [];
    const handle = await sandbox.commands.run("echo ready; sleep 30", { background: true, onStdout: (d) => lines.push(d) });
    await waitFor("ready", () => (lines.join("").includes("ready") ? true : undefined));
    assert.deepEqual(await handle.signal("SIGTERM"), { status: "signalled" });
    const result = await handle.wait();
    assert.equal(result.exitCode, 128 + 15);
    assert.equal((await handle.info()).status, "exited");
  });

  it("reattaches to a background command without losing output", async () => {
    const script = "i=0; while [ $i -lt 30 ]; do echo line$i; echo err$i >&2; i=$((i+1)); sleep 0.05; done";
    const expected = Array.from({ length: 30 }, (_, i) => `line${i}\n`).join("");
    const expectedErr = Array.from({ length: 30 }, (_, i) => `err${i}\n`).join("");
    let firstPart = "";
    const first: CommandHandle = await sandbox.commands.run(script, { background: true, onStdout: (d) => (firstPart += d) });
    await waitFor("some output", () => (firstPart.includes("line3") ? true : undefined));
    first.disconnect();
    const offsets = { stdoutOffset: first.stdoutOffset, stderrOffset: first.stderrOffset };
    assert.equal(offsets.stdoutOffset, Buffer.byteLength(first.stdout));
    // Let the command write more while nobody listens, then reattach from the offsets.
    await new Promise((resolve) => setTimeout(resolve, 300));
    let secondPart = "";
    const second = sandbox.commands.connect(first.execId, { ...offsets, onStdout: (d) => (secondPart += d) });
    const result = await second.wait();
    assert.equal(result.exitCode, 0);
    assert.equal(first.stdout + second.stdout, expected);
    assert.equal(firstPart + secondPart, expected);
    assert.equal(first.stderr + second.stderr, expectedErr);
    // The same handle resumes too, and a fresh connect replays everything.
    const resumed = await first.wait();
    assert.equal(resumed.stdout, expected);
    const replay = await sandbox.commands.connect(first.execId).wait();
    assert.equal(replay.stdout, expected);
    assert.equal(replay.stderr, expectedErr);
    const lines = [];
    for await (const line of sandbox.commands.output(first.execId, { stdoutOffset: 6, follow: false })) lines.push(line);
    assert.deepEqual(lines[0], { stream: "stdout", data: "line1\n", offset: 6 });
    assert.equal(lines.at(-1)?.stream, "exit");
  });

  it("resumes a background command's output after the connection breaks", async () => {
    const proxy = await cuttableProxy(new URL(server.url));
    try {
      const viaProxy = await Sandbox.connect(sandbox.id, { client: new SvcClient({ url: proxy.url }) });
      const expected = Array.from({ length: 40 }, (_, i) => `n${i}\n`).join("");
      let seen = "";
      const handle = await viaProxy.commands.run("i=0; while [ $i -lt 40 ]; do echo n$i; i=$((i+1)); sleep 0.04; done", {
        background: true,
        onStdout: (data) => (seen += data),
      });
      await waitFor("some output", () => (seen.includes("n5") ? true : undefined));
      proxy.cut();
      await waitFor("more output", () => (seen.includes("n12") ? true : undefined));
      proxy.cut();
      const result = await handle.wait();
      assert.equal(result.stdout, expected);
      assert.equal(seen, expected);
      assert.equal(handle.stdoutOffset, expected.length);
    } finally {
      await proxy.close();
    }
  });

  it("lists and gets execs", async () => {
    const result = await sandbox.commands.run("echo listed");
    const list = await sandbox.commands.list();
    assert.ok(list.some((record) => record.exec_id === result.execId));
    const record = await sandbox.commands.get(result.execId);
    assert.equal(record.command, "echo listed");
    assert.equal(record.sandbox_id, sandbox.id);
    assert.equal(record.stdout_bytes, 7);
    assert.equal(record.background, false);
  });

  it("maps unknown execs and ended execs to typed errors", async () => {
    await assert.rejects(sandbox.commands.get("ex-0000000000000000"), NotFoundError);
    const result = await sandbox.commands.run("true");
    await assert.rejects(sandbox.commands.sendStdin(result.execId, "x"), (err: unknown) => {
      assert.ok(err instanceof ConflictError);
      assert.equal(err.status, 409);
      assert.equal(err.code, "conflict");
      return true;
    });
  });
});
