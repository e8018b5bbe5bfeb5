import assert from "node:assert/strict";
import { after, it } from "node:test";
import {
  BadRequestError,
  ConflictError,
  ForbiddenError,
  InternalError,
  LeaseConflictError,
  MethodNotAllowedError,
  NotFoundError,
  PayloadTooLargeError,
  PolicyDeniedError,
  ProviderError,
  RangeNotSatisfiableError,
  UnavailableError,
  BadGatewayError,
  errorFor,
  Quotas,
  ResourceLimitError,
  Sandbox,
  Svc,
  SvcConnectionError,
  SvcError,
  Templates,
  UnauthorizedError,
  events,
  type SvcEvent,
} from "svc-sdk";
import { DOCKER_IMAGE, eachProvider, spawnOptions, startServer, suiteServer } from "./helpers.js";

const server = await suiteServer();

it("has one error class per server error code", () => {
  const table: [string, number, typeof SvcError][] = [
    ["bad_request", 400, BadRequestError],
    ["unauthorized", 401, UnauthorizedError],
    ["forbidden", 403, ForbiddenError],
    ["policy_denied", 403, PolicyDeniedError],
    ["not_found", 404, NotFoundError],
    ["method_not_allowed", 405, MethodNotAllowedError],
    ["conflict", 409, ConflictError],
    ["lease_conflict", 409, LeaseConflictError],
    ["payload_too_large", 413, PayloadTooLargeError],
    ["range_not_satisfiable", 416, RangeNotSatisfiableError],
    ["resource_limit", 429, ResourceLimitError],
    ["provider_error", 500, ProviderError],
    ["internal", 500, InternalError],
    ["bad_gateway", 502, BadGatewayError],
    ["unavailable", 503, UnavailableError],
  ];
  for (const [code, status, Class] of table) {
    const err = errorFor(code, status, "message");
    assert.ok(err instanceof Class, code);
    assert.ok(err instanceof SvcError);
    assert.equal(err.name, Class.name);
    assert.equal(err.code, code);
    assert.equal(err.status, status);
  }
  assert.ok(errorFor("policy_denied", 403, "m") instanceof ForbiddenError);
  assert.ok(errorFor("lease_conflict", 409, "m") instanceof ConflictError);
  const unknown = errorFor("something_new", 418, "teapot");
  assert.equal(unknown.constructor, SvcError);
  assert.equal(unknown.code, "something_new");
});

eachProvider(server, "templates", (provider) => {
  const templates = new Templates();
  const name = `sdk-${provider}-${Date.now().toString(36)}`;

  it("creates, lists, gets, updates, spawns from and deletes a template", async () => {
    const image = provider === "docker" ? DOCKER_IMAGE : "alpine:latest";
    const created = await templates.create(name, { image, provider, ttl: "15m", memory_mb: 128, metadata: { kind: "sdk" } });
    assert.equal(created.name, name);
    assert.equal(created.ttl, "15m0s");
    assert.equal(created.memory_mb, 128);
    await assert.rejects(templates.create(name, { image, provider }), ConflictError);
    assert.ok((await templates.list()).some((t) => t.name === name));
    assert.equal((await templates.get(name)).image, image);
    const updated = await templates.update(name, { image, provider, ttl: 1200, memory_mb: 256, metadata: { kind: "sdk", v: "2" }, warm_pool: 1 });
    assert.equal(updated.ttl, "20m0s");
    assert.equal(updated.memory_mb, 256);
    assert.equal(updated.warm_pool, 1);
    const deadline = Date.now() + 30_000;
    while (((await templates.get(name)).warm_ready ?? 0) < 1) {
      assert.ok(Date.now() < deadline, "the warm pool never filled");
      await new Promise((resolve) => setTimeout(resolve, 50));
    }

    const sandbox = await templates.spawn(name, { ttl: "5m", env: { FROM: "warm" }, metadata: { req: "1" } });
    try {
      assert.equal(sandbox.info.provider, provider);
      assert.equal(sandbox.info.memory_mb, 256);
      assert.equal(sandbox.info.template, name);
      assert.equal(sandbox.info.metadata.v, "2");
      assert.equal(sandbox.info.metadata.req, "1");
      assert.equal((await sandbox.commands.run("echo $FROM")).stdout, "warm\n");
    } finally {
      await sandbox.destroy();
    }
    await using fromCreate = await Sandbox.create({ template: name });
    assert.equal(fromCreate.info.template, name);
    assert.equal(fromCreate.info.provider, provider);

    assert.deepEqual(await templates.delete(name), { status: "deleted" });
    await assert.rejects(templates.get(name), NotFoundError);
    await assert.rejects(templates.spawn(name), NotFoundError);
  });
});

eachProvider(server, "quotas", (provider) => {
  const quotas = new Quotas();
  const owner = `sdk-owner-${provider}`;

  it("sets, gets, lists, summarises, enforces and deletes an owner quota", async () => {
    await assert.rejects(quotas.get(owner), NotFoundError);
    const usage0 = await quotas.usage(owner);
    assert.equal(usage0.quota_configured, false);
    const saved = await quotas.set(owner, { max_sandboxes: 1, max_ttl: "1h", max_exec_timeout: 90 });
    assert.equal(saved.owner_id, owner);
    assert.equal(saved.max_sandboxes, 1);
    assert.equal(saved.max_ttl, "1h0m0s");
    assert.equal(saved.max_exec_timeout, "1m30s");
    assert.equal((await quotas.get(owner)).max_sandboxes, 1);
    assert.ok((await quotas.list()).some((q) => q.owner_id === owner));
    assert.ok((await quotas.summary()).with_max_sandboxes >= 1);

    await using sandbox = await Sandbox.create(spawnOptions(provider, { owner_id: owner }));
    assert.equal(sandbox.info.owner_id, owner);
    const usage = await quotas.usage(owner);
    assert.equal(usage.active_sandboxes, 1);
    assert.equal(usage.quota_configured, true);
    await assert.rejects(Sandbox.create(spawnOptions(provider, { owner_id: owner })), (err: unknown) => {
      assert.ok(err instanceof ResourceLimitError);
      assert.equal(err.status, 429);
      return true;
    });
    await assert.rejects(sandbox.commands.run("true", { timeout: "5m" }), ResourceLimitError);
    await assert.rejects(quotas.set(owner, { max_sandboxes: -1 }), BadRequestError);
    assert.deepEqual(await quotas.delete(owner), { status: "deleted" });
    await assert.rejects(quotas.get(owner), NotFoundError);
  });
});

eachProvider(server, "events", (provider) => {
  it("iterates events and sees sandbox.created", async () => {
    const stream = await events({ types: ["sandbox.created", "sandbox.destroyed"] });
    const sandbox = await Sandbox.create(spawnOptions(provider));
    const seen: SvcEvent[] = [];
    const deadline = setTimeout(() => stream.close(), 60_000);
    try {
      for await (const event of stream) {
        if (event.sandbox_id !== sandbox.id) continue;
        seen.push(event);
        if (event.type === "sandbox.created") await sandbox.destroy();
        if (event.type === "sandbox.destroyed") break;
      }
    } finally {
      clearTimeout(deadline);
      stream.close();
    }
    assert.deepEqual(seen.map((e) => e.type), ["sandbox.created", "sandbox.destroyed"]);
    const created = seen[0];
    assert.ok(created);
    assert.equal(created.data?.provider, provider);
    assert.match(created.timestamp, /Z$/);
    assert.ok(stream.lastEventId);

    // Resuming from an event ID replays what followed it, filtered by sandbox.
    const svc = new Svc();
    await using replay = await svc.events({ sandboxId: sandbox.id, lastEventId: created.id });
    const timer = setTimeout(() => replay.close(), 10_000);
    const types: string[] = [];
    for await (const event of replay) {
      types.push(event.type);
      if (event.type === "sandbox.destroyed") break;
    }
    clearTimeout(timer);
    assert.ok(!types.includes("sandbox.created"));
    assert.equal(types.at(-1), "sandbox.destroyed");
  });

  it("follows one sandbox's events", async () => {
    await using sandbox = await Sandbox.create(spawnOptions(provider));
    await using stream = await sandbox.events({ types: ["exec.completed"] });
    const result = await sandbox.commands.run("exit 4");
    const timer = setTimeout(() => stream.close(), 10_000);
    let completed: SvcEvent | undefined;
    for await (const event of stream) {
      completed = event;
      break;
    }
    clearTimeout(timer);
    assert.equal(completed?.type, "exec.completed");
    assert.equal(completed?.sandbox_id, sandbox.id);
    assert.equal(completed?.data?.exit_code, 4);
    assert.equal(typeof result.execId, "string");
  });
});

eachProvider(server, "service", (provider) => {
  it("answers health, readiness and providers", async () => {
    const svc = new Svc({ url: server.url });
    assert.equal((await svc.health()).status, "ok");
    const ready = await svc.ready();
    assert.equal(ready.status, "ready");
    const providers = await svc.providers();
    assert.ok(providers.some((p) => p.name === provider && p.healthy));
    const detail = await svc.provider(provider);
    assert.equal(detail.name, provider);
    await assert.rejects(svc.provider("no-such-provider"), NotFoundError);
    assert.equal((await svc.admission(spawnOptions(provider))).allowed, true);
    const sandbox = await svc.createSandbox(spawnOptions(provider));
    try {
      assert.ok((await svc.listSandboxes({ provider })).some((s) => s.id === sandbox.id));
      assert.equal((await svc.connectSandbox(sandbox.id)).id, sandbox.id);
      assert.equal((await svc.getSandbox(sandbox.id)).state, "running");
      const extended = await svc.extendSandbox(sandbox.id, "45m");
      assert.equal(extended.expires_at, (await sandbox.getInfo()).expires_at);
      assert.equal(typeof (await svc.prune()), "number");
    } finally {
      assert.deepEqual(await svc.destroySandbox(sandbox.id), { status: "destroyed" });
    }
  });

  it("throws SvcConnectionError when nothing answers", async () => {
    await assert.rejects(Sandbox.list({ url: "http://127.0.0.1:9" }), (err: unknown) => {
      assert.ok(err instanceof SvcConnectionError);
      assert.ok(err instanceof SvcError);
      assert.equal(err.status, 0);
      assert.equal(err.code, "connection_error");
      return true;
    });
  });
});

const API_KEY = "sdk-test-key-0123456789abcdef0123456789";
const authServer = await startServer({
  // The mock is named: with authentication on, svc leaves it off otherwise (decisions §30).
  env: {
    SVC_AUTH__ENABLED: "true",
    SVC_AUTH__API_KEY: API_KEY,
    SVC_SERVER__MAX_UPLOAD_BYTES: "1024",
    SVC_PROVIDERS__MOCK__ENABLED: "true",
  },
});
after(() => authServer.stop());

eachProvider(server, "restricted server (API key, upload limit)", (provider) => {
  it("sends X-API-Key from SVC_API_KEY or the option, and maps 401", async () => {
    const url = authServer.url;
    await assert.rejects(Sandbox.list({ url }), (err: unknown) => {
      assert.ok(err instanceof UnauthorizedError);
      assert.equal(err.code, "unauthorized");
      assert.equal(err.status, 401);
      return true;
    });
    await assert.rejects(Sandbox.list({ url, apiKey: "wrong" }), UnauthorizedError);
    const options = { url, apiKey: API_KEY };
    await using sandbox = await Sandbox.create({ ...spawnOptions(provider), ...options });
    assert.equal((await sandbox.commands.run("echo authed")).stdout, "authed\n");
    const session = await sandbox.pty.create({ command: "echo ws-authed" });
    assert.equal(await session.wait(), 0);
    assert.match(session.output, /ws-authed/);
    await sandbox.files.write("/small", "x".repeat(1024));
    await assert.rejects(sandbox.files.write("/small", "y".repeat(4096)), PayloadTooLargeError);
    assert.equal(await sandbox.files.readText("/small"), "x".repeat(1024));
    process.env.SVC_API_KEY = API_KEY;
    try {
      assert.ok((await Sandbox.list({ url })).some((s) => s.id === sandbox.id));
    } finally {
      delete process.env.SVC_API_KEY;
    }
  });
});
