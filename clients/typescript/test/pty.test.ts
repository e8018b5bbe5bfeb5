import assert from "node:assert/strict";
import { after, before, it } from "node:test";
import { BadRequestError, ExecSession, NotFoundError, ResourceLimitError, Sandbox, SvcClient, SvcTimeoutError } from "svc-sdk";
import { eachProvider, spawnOptions, suiteServer } from "./helpers.js";

const server = await suiteServer();

eachProvider(server, "pty", (provider) => {
  let sandbox: Sandbox;
  before(async () => {
    sandbox = await Sandbox.create(spawnOptions(provider));
  });
  after(async () => {
    await sandbox?.destroy();
  });

  it("echoes input through a terminal session and exits", async () => {
    let streamed = "";
    const session = await sandbox.pty.create({ cols: 100, rows: 30, onData: (data) => (streamed += data) });
    try {
      assert.match(session.execId ?? "", /^ex-[0-9a-f]{16}$/);
      session.sendInput("echo pty-$((40+2))\n");
      // The computed value proves the shell ran it (the typed line itself reads `$((40+2))`).
      await session.waitForOutput("pty-42");
      session.sendInput("[ -t 0 ] && echo is-a-tty\n");
      await session.waitForOutput("is-a-tty");
      session.resize(120, 40);
      session.sendInput("stty size\n");
      await session.waitForOutput("40 120");
      session.sendInput("exit 5\n");
      assert.equal(await session.wait(), 5);
      assert.equal(streamed, session.output);
      const record = await sandbox.commands.get(session.execId ?? "");
      assert.equal(record.exit_code, 5);
    } finally {
      session.close();
    }
  });

  it("signals the session's command", async () => {
    const session = await sandbox.pty.create({ command: "echo ready; sleep 30" });
    try {
      await session.waitForOutput("ready");
      session.kill();
      assert.equal(await session.wait(), 128 + 9);
    } finally {
      session.close();
    }
  });

  it("reports deadlines and refused messages with typed errors", async () => {
    const session = await sandbox.pty.create({ command: "cat" });
    try {
      await assert.rejects(session.waitForOutput("never printed", 300), SvcTimeoutError);
      session.resize(70_000, 10); // over u16: the server answers {"type":"error"} and closes
      await assert.rejects(session.wait(), BadRequestError);
    } finally {
      session.close();
    }
  });

  it("raises the typed error of a refused start", async () => {
    const session = await sandbox.pty.create({ command: "true", timeout: "48h" });
    try {
      await assert.rejects(session.wait(), (err: unknown) =>
        err instanceof ResourceLimitError && err.code === "resource_limit" && /max_exec_timeout/.test(err.message));
    } finally {
      session.close();
    }
  });

  it("refuses a session on an unknown sandbox with NotFoundError", async () => {
    await assert.rejects(ExecSession.open(new SvcClient(), "sb-0000000000000000", true), NotFoundError);
  });
});
