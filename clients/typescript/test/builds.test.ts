// Template builds: `templates.build` and the calls under it. Builds run on the server's Docker engine
// whatever the template's provider, so they are docker cases (the templates use the docker provider
// so that the built image can be spawned). Each Dockerfile sets a random ENV so the engine's cache
// runs every step.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, it } from "node:test";
import {
  BuildError,
  ConflictError,
  NotFoundError,
  Sandbox,
  SvcTimeoutError,
  Templates,
  type BuildLogLine,
  type TemplateBuild,
} from "svc-sdk";
import { DOCKER_IMAGE, eachProvider, suiteServer } from "./helpers.js";

const server = await suiteServer();

const nonce = () => randomBytes(6).toString("hex");
const dockerfile = (...lines: string[]) => [`FROM ${DOCKER_IMAGE}`, `ENV X=${nonce()}`, ...lines].join("\n") + "\n";
/** The output lines' text, joined. */
const outputOf = (lines: BuildLogLine[]) => lines.map((line) => (line.type === "output" ? line.data : "")).join("");

eachProvider(
  server,
  "template builds",
  () => {
    const templates = new Templates();
    const name = `Build-${nonce()}`; // upper case: the image name is the lowercased template name
    before(async () => {
      await templates.create(name, { provider: "docker", image: DOCKER_IMAGE });
    });
    after(async () => {
      await templates.delete(name);
    });

    it("builds from a Dockerfile and files, passing each log line on", async () => {
      const content = `a-${nonce()}`;
      const lines: BuildLogLine[] = [];
      const record = await templates.build(name, {
        dockerfile: dockerfile("COPY a.txt /a.txt", "RUN cat /a.txt"),
        files: { "a.txt": `${content}\n` },
        onLog: (line) => lines.push(line),
        timeoutMs: 120_000,
      });
      assert.equal(record.status, "succeeded");
      assert.match(record.build_id, /^bd-[0-9a-f]{16}$/);
      assert.equal(record.template, name);
      assert.equal(record.image, `svc-templates/${name.toLowerCase()}:${record.build_id}`);
      assert.equal((await templates.get(name)).image, record.image);
      assert.ok(lines.some((line) => line.type === "step" && line.instruction === "RUN cat /a.txt"));
      assert.ok(lines.some((line) => line.type === "output" && line.data.includes(content)));
      const last = lines.at(-1);
      assert.ok(last?.type === "result" && last.image === record.image);

      assert.deepEqual((await templates.listBuilds(name))[0], record);
      assert.deepEqual(await templates.getBuild(name, record.build_id), record);
      const replay: BuildLogLine[] = [];
      for await (const line of templates.buildLogs(name, record.build_id, { follow: false })) replay.push(line);
      assert.deepEqual(replay, lines);
      await using sandbox = await Sandbox.create({ template: name });
      assert.equal((await sandbox.commands.run("cat /a.txt")).stdout, `${content}\n`);
    });

    it("builds from a context directory (sent as tar)", async () => {
      const dir = mkdtempSync(path.join(os.tmpdir(), "svc-build-ctx-"));
      try {
        mkdirSync(path.join(dir, "sub"));
        writeFileSync(path.join(dir, "sub", "b.txt"), "bee\n");
        writeFileSync(path.join(dir, "Dockerfile"), dockerfile("COPY . /ctx", "RUN cat /ctx/sub/b.txt"));
        let lines: BuildLogLine[] = [];
        const onLog = (line: BuildLogLine) => lines.push(line);
        assert.equal((await templates.build(name, { contextDir: dir, onLog, timeoutMs: 120_000 })).status, "succeeded");
        assert.match(outputOf(lines), /bee\n/);
        // `dockerfile` replaces the directory's; `files` (a long name here) join the context
        lines = [];
        const long = `${"d".repeat(120)}/extra.bin`;
        const record = await templates.build(name, {
          contextDir: dir,
          dockerfile: dockerfile("COPY . /ctx", `RUN cat /ctx/${long} /ctx/sub/b.txt`),
          files: { [long]: new TextEncoder().encode("extra\n") },
          onLog,
          timeoutMs: 120_000,
        });
        assert.equal(record.status, "succeeded");
        assert.match(outputOf(lines), /extra\nbee\n/);
        // the same as JSON: base64, because one file is bytes
        lines = [];
        await templates.build(name, {
          dockerfile: dockerfile("COPY . /ctx", "RUN cat /ctx/t.txt /ctx/b.bin"),
          files: { "t.txt": "text\n", "b.bin": new Uint8Array([0x62, 0x69, 0x6e, 0x0a]) },
          onLog,
          timeoutMs: 120_000,
        });
        assert.match(outputOf(lines), /text\nbin\n/);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    });

    it("throws BuildError when a step fails", async () => {
      const before = (await templates.get(name)).image;
      await assert.rejects(templates.build(name, { dockerfile: dockerfile("RUN exit 3"), timeoutMs: 120_000 }), (err: unknown) => {
        assert.ok(err instanceof BuildError);
        assert.match(err.message, /step/);
        assert.match(err.message, /exit 3/);
        assert.equal(err.code, "build_failed");
        assert.equal(err.build.status, "failed");
        assert.equal(err.build.image, null);
        return true;
      });
      assert.equal((await templates.get(name)).image, before);
    });

    it("cancels a running build", async () => {
      const started = await templates.startBuild(name, { dockerfile: dockerfile("RUN sleep 30") });
      assert.equal(started.status, "running");
      for await (const line of templates.buildLogs(name, started.build_id)) {
        if (line.type === "step" && line.instruction === "RUN sleep 30") break;
      }
      const cancelled = await templates.cancelBuild(name, started.build_id);
      assert.equal(cancelled.status, "cancelled");
      assert.equal((await templates.getBuild(name, started.build_id)).status, "cancelled");
      await assert.rejects(templates.cancelBuild(name, started.build_id), ConflictError);

      // cancelled from elsewhere while build() follows it: BuildError too, never silence
      const cancels: Promise<TemplateBuild>[] = [];
      const onLog = (line: BuildLogLine) => {
        if (line.type === "step" && line.instruction === "RUN sleep 30") {
          cancels.push(templates.listBuilds(name).then((builds) => templates.cancelBuild(name, builds[0]!.build_id)));
        }
      };
      await assert.rejects(templates.build(name, { dockerfile: dockerfile("RUN sleep 30"), onLog, timeoutMs: 120_000 }), (err: unknown) => {
        assert.ok(err instanceof BuildError);
        assert.equal(err.code, "build_cancelled");
        assert.equal(err.build.status, "cancelled");
        return true;
      });
      assert.deepEqual((await Promise.all(cancels)).map((build) => build.status), ["cancelled"]);

      // past timeoutMs the build is cancelled
      await assert.rejects(templates.build(name, { dockerfile: dockerfile("RUN sleep 30"), timeoutMs: 2000 }), SvcTimeoutError);
      assert.equal((await templates.listBuilds(name))[0]?.status, "cancelled");
    });
  },
  ["docker"],
);

eachProvider(server, "template builds (errors)", (provider) => {
  const templates = new Templates();

  it("throws NotFoundError for an unknown template or build", async () => {
    await assert.rejects(templates.build("no-such-template", { dockerfile: "FROM scratch\n" }), NotFoundError);
    await assert.rejects(templates.listBuilds("no-such-template"), NotFoundError);
    const name = `nobuild-${provider}-${nonce()}`;
    await templates.create(name, { provider });
    try {
      assert.deepEqual(await templates.listBuilds(name), []);
      await assert.rejects(templates.getBuild(name, "bd-0000000000000000"), NotFoundError);
      await assert.rejects(templates.cancelBuild(name, "bd-0000000000000000"), NotFoundError);
      await assert.rejects(templates.startBuild(name, {}), TypeError);
    } finally {
      await templates.delete(name);
    }
  });
});
