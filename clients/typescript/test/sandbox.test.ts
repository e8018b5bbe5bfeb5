import assert from "node:assert/strict";
import { it } from "node:test";
import http from "node:http";
import { BadRequestError, ConflictError, NotFoundError, ResourceLimitError, Sandbox, SvcClient, Templates } from "svc-sdk";
import { eachProvider, freePort, spawnOptions, suiteServer, waitFor } from "./helpers.js";

const server = await suiteServer();

eachProvider(server, "sandbox", (provider) => {
  it("creates, gets, lists, connects, extends and destroys", async () => {
    const sandbox = await Sandbox.create(spawnOptions(provider, { ttl: "10m", metadata: { suite: "sdk", case: "lifecycle" }, memory_mb: 256 }));
    try {
      assert.match(sandbox.id, /^sb-[0-9a-f]{16}$/);
      assert.equal(sandbox.info.state, "running");
      assert.equal(sandbox.info.provider, provider);
      assert.equal(sandbox.info.memory_mb, 256);
      assert.deepEqual(sandbox.info.metadata, { suite: "sdk", case: "lifecycle" });
      assert.equal(sandbox.info.preview_domain, `${sandbox.id}.localhost`);
      const lifetime = Date.parse(sandbox.info.expires_at) - Date.parse(sandbox.info.created_at);
      assert.ok(Math.abs(lifetime - 600_000) < 5_000, `lifetime ${lifetime}ms`);

      const got = await Sandbox.get(sandbox.id);
      assert.equal(got.id, sandbox.id);
      const listed = await Sandbox.list({ provider });
      assert.ok(listed.some((s) => s.id === sandbox.id));
      assert.ok(!(await Sandbox.list({ provider: provider === "mock" ? "docker" : "mock" })).some((s) => s.id === sandbox.id));

      const connected = await Sandbox.connect(sandbox.id);
      assert.equal(connected.info.image, sandbox.info.image);
      assert.equal((await connected.commands.run("echo connected")).stdout, "connected\n");
      assert.equal(await connected.isRunning(), true);

      const before = Date.parse((await sandbox.refresh()).expires_at);
      const extended = await sandbox.extend("1h");
      assert.ok(Date.parse(extended.expires_at) > before + 40 * 60_000);
      assert.equal(sandbox.info.expires_at, extended.expires_at);
      const extendedBySeconds = await Sandbox.extend(sandbox.id, 1200);
      assert.ok(Date.parse(extendedBySeconds.expires_at) < Date.parse(extended.expires_at));
      await assert.rejects(sandbox.extend("100h"), ResourceLimitError);

      const logs = await sandbox.logs({ lines: 50 });
      assert.ok(Array.isArray(logs));
      const stats = await sandbox.stats();
      assert.equal(typeof stats.memory_bytes, "number");
      assert.match(stats.sampled_at, /Z$/);
    } finally {
      assert.deepEqual(await sandbox.destroy(), { status: "destroyed" });
    }
    const gone = await Sandbox.get(sandbox.id);
    assert.equal(gone.state, "destroyed");
    assert.equal(gone.state_reason, "destroyed_by_request");
    assert.ok((await Sandbox.list({ state: "destroyed" })).some((s) => s.id === sandbox.id));
    assert.ok(!(await Sandbox.list()).some((s) => s.id === sandbox.id));
    assert.deepEqual(await Sandbox.destroy(sandbox.id), { status: "destroyed" });
    await assert.rejects(sandbox.commands.run("true"), ConflictError);
    await assert.rejects(sandbox.files.write("/x", "x"), ConflictError);
  });

  it("pauses and resumes: a paused sandbox's counter stops and commands are refused", async () => {
    await Sandbox.with(spawnOptions(provider), async (sandbox) => {
      // The counter prints the machine's uptime: while the sandbox is paused it prints nothing,
      // so its output shows a gap at least as long as the pause.
      const job = await sandbox.commands.run("while true; do read up rest < /proc/uptime; echo $up; sleep 0.05; done", { background: true });
      const uptimes = (output: string) => output.slice(0, output.lastIndexOf("\n") + 1).split("\n").filter(Boolean).map(Number);
      const printed = async () => (await job.info()).stdout_bytes;
      const deadline = Date.now() + 20_000;
      while ((await printed()) === 0) {
        assert.ok(Date.now() < deadline, "the counter never printed");
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      const paused = await sandbox.pause();
      const pausedFrom = performance.now();
      assert.equal(paused.state, "paused");
      assert.ok(paused.paused_at);
      await new Promise((resolve) => setTimeout(resolve, 1000));
      await assert.rejects(sandbox.commands.run("true"), ConflictError);
      assert.equal((await Sandbox.pause(sandbox.id)).state, "paused");
      const pausedFor = (performance.now() - pausedFrom) / 1000;
      const resumed = await sandbox.resume();
      assert.equal(resumed.state, "running");
      assert.equal(resumed.paused_at, undefined);
      const now = Number((await sandbox.commands.run("cat /proc/uptime")).stdout.split(" ")[0]);
      await waitFor("the counter to continue", () => (uptimes(job.stdout).some((up) => up > now) ? true : undefined), 20_000);
      await job.kill();
      const ups = uptimes((await job.wait()).stdout);
      const gap = Math.max(...ups.slice(1).map((up, i) => up - (ups[i] ?? up)));
      assert.ok(gap >= pausedFor - 0.1, `a paused sandbox went on printing (longest gap ${gap.toFixed(2)}s of ${pausedFor.toFixed(2)}s)`);
    });
  });

  it("Sandbox.with destroys afterwards, also when the callback throws", async () => {
    let id = "";
    const answer = await Sandbox.with(spawnOptions(provider), async (sandbox) => {
      id = sandbox.id;
      return (await sandbox.commands.run("echo 42")).stdout.trim();
    });
    assert.equal(answer, "42");
    assert.equal((await Sandbox.get(id)).state, "destroyed");

    let failedId = "";
    await assert.rejects(
      Sandbox.with(spawnOptions(provider), async (sandbox) => {
        failedId = sandbox.id;
        throw new Error("boom");
      }),
      /boom/,
    );
    assert.equal((await Sandbox.get(failedId)).state, "destroyed");
  });

  it("await using destroys at the end of the scope", async () => {
    let id = "";
    {
      await using sandbox = await Sandbox.create(spawnOptions(provider));
      id = sandbox.id;
      assert.equal((await Sandbox.get(id)).state, "running");
    }
    assert.equal((await Sandbox.get(id)).state, "destroyed");
  });

  it("answers admission and prune", async () => {
    const decision = await Sandbox.admission(spawnOptions(provider, { ttl: "5m" }));
    assert.equal(decision.allowed, true);
    const denied = await Sandbox.admission(spawnOptions(provider, { ttl: "100h" }));
    assert.equal(denied.allowed, false);
    assert.equal(denied.reason, "max_ttl");
    assert.equal(typeof (await Sandbox.prune()), "number");
  });

  it("maps spawn and lookup errors to typed errors", async () => {
    await assert.rejects(Sandbox.get("sb-0000000000000000"), (err: unknown) => {
      assert.ok(err instanceof NotFoundError);
      assert.equal(err.code, "not_found");
      assert.equal(err.status, 404);
      assert.match(err.message, /sb-0000000000000000/);
      assert.ok(err.requestId);
      return true;
    });
    await assert.rejects(Sandbox.connect("sb-0000000000000000"), NotFoundError);
    await assert.rejects(Sandbox.create({ provider: "no-such-provider" }), BadRequestError);
    await assert.rejects(Sandbox.create(spawnOptions(provider, { ttl: "100h" })), ResourceLimitError);
    await assert.rejects(Sandbox.create(spawnOptions(provider, { ttl: "-5m" })), BadRequestError);
    // A client pointed elsewhere explicitly wins over SVC_URL.
    const client = new SvcClient({ url: `${server.url}/api/v1/` });
    assert.equal((await Sandbox.list({ client, provider })).every((s) => s.provider === provider), true);
  });

  it("previews a web server in the sandbox by path and by host name", async () => {
    await Sandbox.with(spawnOptions(provider), async (sandbox) => {
      // The mock's commands share the host's network, so its port must be free here.
      const port = provider === "docker" ? 8080 : await freePort();
      await sandbox.files.write("/www/index.html", "hello from the sandbox\n");
      const web = await sandbox.commands.run(`busybox httpd -f -p ${port} -h .`, { workdir: "/www", background: true });
      try {
        const preview = await sandbox.preview(port, { ttl: "2m" });
        const host = sandbox.getHost(port);
        assert.equal(host, `${port}-${sandbox.id}.localhost`);
        assert.ok(preview.url.startsWith(`http://${host}`), preview.url);
        assert.ok(Date.parse(preview.expires_at) > Date.now() + 60_000);
        const byPath = `${server.url}/api/v1/sandboxes/${sandbox.id}/proxy/${port}/index.html?svc_preview_token=${encodeURIComponent(preview.token)}`;
        const body = await waitFor("the preview to answer", async () => {
          const response = await fetch(byPath);
          return response.status === 502 ? undefined : [response.status, await response.text()];
        }, 20_000);
        assert.deepEqual(body, [200, "hello from the sandbox\n"]);
        const byHost = await new Promise<string>((resolve, reject) => {
          const url = new URL(server.url);
          http.get({ host: url.hostname, port: url.port, path: "/index.html", headers: { host } }, (response) => {
            let text = "";
            response.setEncoding("utf8").on("data", (chunk: string) => (text += chunk)).on("end", () => resolve(`${response.statusCode} ${text}`));
          }).on("error", reject);
        });
        assert.equal(byHost, "200 hello from the sandbox\n");
      } finally {
        await web.kill();
      }
    });
    await assert.rejects(Sandbox.preview("sb-0000000000000000", 8080), NotFoundError);
  });

  it("asks for egress and shows it on the sandbox and template", async () => {
    const allow = ["192.0.2.9:9", "*.example.internal"];
    if (provider === "mock") {
      // The mock does not enforce egress: refused, naming the field.
      await assert.rejects(Sandbox.create(spawnOptions(provider, { egress: allow })), (err: unknown) => err instanceof BadRequestError && /egress/.test(err.message));
      await Sandbox.with(spawnOptions(provider), (sandbox) => assert.deepEqual(sandbox.info.egress, { mode: "all", allow: [] }));
      return;
    }
    await Sandbox.with(spawnOptions(provider, { egress: allow }), async (sandbox) => {
      assert.deepEqual(sandbox.info.egress, { mode: "allowlist", allow });
      assert.deepEqual((await Sandbox.get(sandbox.id)).egress, { mode: "allowlist", allow });
    });
    await Sandbox.with(spawnOptions(provider, { egress: "none" }), (sandbox) => assert.deepEqual(sandbox.info.egress, { mode: "none", allow: [] }));
    const templates = new Templates();
    const name = `egress-ts-${Date.now()}`;
    const template = await templates.create(name, { image: spawnOptions(provider).image, provider, egress: { mode: "allowlist", allow } });
    try {
      assert.deepEqual(template.egress, { mode: "allowlist", allow });
    } finally {
      await templates.delete(name);
    }
  });
});

it("lists every page: the server answers 1000 at a time, Sandbox.list follows X-Next-Cursor", async () => {
  const ids = new Set<string>();
  const make = async () => {
    const sandbox = await Sandbox.create({ provider: "mock", owner_id: "ts-pager", ttl: "10m" });
    ids.add(sandbox.id);
  };
  for (let i = 0; i < 1001; i += 8) await Promise.all(Array.from({ length: Math.min(8, 1001 - i) }, make));
  try {
    const listed = (await Sandbox.list({ owner_id: "ts-pager" })).map((s) => s.id);
    assert.equal(listed.length, 1001);
    assert.deepEqual(new Set(listed), ids);
  } finally {
    const all = [...ids];
    for (let i = 0; i < all.length; i += 16) await Promise.all(all.slice(i, i + 16).map((id) => Sandbox.destroy(id)));
  }
});
