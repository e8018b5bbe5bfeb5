import assert from "node:assert/strict";
import { createHash, randomBytes } from "node:crypto";
import { chmodSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { Readable, Writable } from "node:stream";
import { after, before, it } from "node:test";
import { BadRequestError, NotFoundError, RangeNotSatisfiableError, Sandbox } from "svc-sdk";
import { eachProvider, spawnOptions, suiteServer } from "./helpers.js";

const server = await suiteServer();

/** Every file under a directory: relative path → sha256 (directories as "dir"). */
function tree(root: string): Record<string, string> {
  const out: Record<string, string> = {};
  const walk = (dir: string, prefix: string) => {
    for (const name of readdirSync(dir).sort()) {
      const full = path.join(dir, name);
      const rel = prefix ? `${prefix}/${name}` : name;
      if (statSync(full).isDirectory()) {
        out[rel] = "dir";
        walk(full, rel);
      } else {
        out[rel] = createHash("sha256").update(readFileSync(full)).digest("hex");
      }
    }
  };
  walk(root, "");
  return out;
}

eachProvider(server, "files", (provider) => {
  let sandbox: Sandbox;
  let local: string;
  before(async () => {
    sandbox = await Sandbox.create(spawnOptions(provider));
    local = mkdtempSync(path.join(os.tmpdir(), "svc-sdk-files-"));
  });
  after(async () => {
    await sandbox?.destroy();
    rmSync(local, { recursive: true, force: true });
  });

  it("writes and reads text and binary", async () => {
    const written = await sandbox.files.write("/data/hello.txt", "héllo\n");
    assert.deepEqual(written, { status: "written", size: 7 });
    assert.equal(await sandbox.files.readText("/data/hello.txt"), "héllo\n");
    const bytes = new Uint8Array(256).map((_, i) => i);
    await sandbox.files.write("/data/all.bin", bytes);
    const back = await sandbox.files.read("/data/all.bin");
    assert.ok(back instanceof Uint8Array);
    assert.deepEqual(Buffer.from(back), Buffer.from(bytes));
  });

  it("streams writes from Node and web streams and reads into streams", async () => {
    const big = randomBytes(3 * 1024 * 1024 + 17);
    const parts = [big.subarray(0, 1_000_000), big.subarray(1_000_000, 2_500_000), big.subarray(2_500_000)];
    const fromNode = await sandbox.files.write("/streams/node.bin", Readable.from(parts));
    assert.equal(fromNode.size, big.length);
    const web = new ReadableStream<Uint8Array>({
      start(controller) {
        for (const part of parts) controller.enqueue(new Uint8Array(part));
        controller.close();
      },
    });
    assert.equal((await sandbox.files.write("/streams/web.bin", web)).size, big.length);
    // web ReadableStream out
    const chunks: Uint8Array[] = [];
    for await (const chunk of (await sandbox.files.readStream("/streams/web.bin")) as unknown as AsyncIterable<Uint8Array>) chunks.push(chunk);
    assert.ok(Buffer.concat(chunks).equals(big));
    // Node Writable out
    const collected: Buffer[] = [];
    const sink = new Writable({
      write(chunk: Buffer, _encoding, done) {
        collected.push(chunk);
        done();
      },
    });
    await sandbox.files.readTo("/streams/node.bin", sink);
    assert.ok(Buffer.concat(collected).equals(big));
    // web WritableStream out
    const webChunks: Uint8Array[] = [];
    await sandbox.files.readTo("/streams/node.bin", new WritableStream<Uint8Array>({ write: (chunk) => void webChunks.push(chunk) }));
    assert.ok(Buffer.concat(webChunks).equals(big));
  });

  it("reads byte ranges", async () => {
    await sandbox.files.write("/range.txt", "0123456789");
    assert.equal(await sandbox.files.readText("/range.txt", { range: { start: 2, end: 4 } }), "234");
    assert.equal(await sandbox.files.readText("/range.txt", { range: { start: 7 } }), "789");
    await assert.rejects(sandbox.files.read("/range.txt", { range: { start: 50, end: 60 } }), RangeNotSatisfiableError);
  });

  it("writes with a mode, writes JSON content, stats, lists, globs and checks existence", async () => {
    await sandbox.files.write("/tree/a.sh", "#!/bin/sh\n", { mode: "0755" });
    await sandbox.files.writeJson("/tree/b.txt", Buffer.from([0, 1, 2, 255]).toString("base64"), { encoding: "base64", mode: 0o600 });
    await sandbox.files.writeJson("/tree/sub/c.txt", "c");
    assert.deepEqual(Buffer.from(await sandbox.files.read("/tree/b.txt")), Buffer.from([0, 1, 2, 255]));
    const info = await sandbox.files.stat("/tree/a.sh");
    assert.equal(info.name, "a.sh");
    assert.equal(info.path, "/tree/a.sh");
    assert.equal(info.size, 10);
    assert.equal(info.is_dir, false);
    assert.equal(info.mode, "0755");
    assert.match(info.mod_time, /Z$/);
    assert.equal((await sandbox.files.stat("/tree/b.txt")).mode, "0600");
    const entries = await sandbox.files.list("/tree");
    assert.deepEqual(entries.map((e) => [e.name, e.is_dir]), [["a.sh", false], ["b.txt", false], ["sub", true]]);
    assert.ok((await sandbox.files.list()).some((e) => e.name === "tree"));
    assert.deepEqual(await sandbox.files.glob("/tree/**/*.txt"), ["/tree/b.txt", "/tree/sub/c.txt"]);
    assert.equal(await sandbox.files.exists("/tree/a.sh"), true);
    assert.equal(await sandbox.files.exists("/tree/nope"), false);
  });

  it("makes directories and writes text", async () => {
    await sandbox.files.makeDir("/made/a/b");
    const info = await sandbox.files.stat("/made/a/b");
    assert.equal(info.is_dir, true);
    assert.deepEqual(await sandbox.files.list("/made/a/b"), []);
    assert.equal((await sandbox.files.writeText("/made/a/b/t.txt", "text", { mode: "0640" })).size, 4);
    assert.equal((await sandbox.files.stat("/made/a/b/t.txt")).mode, "0640");
  });

  it("moves, chmods and removes", async () => {
    await sandbox.files.write("/mv/src.txt", "moved");
    await sandbox.files.write("/mv/dst.txt", "old");
    assert.deepEqual(await sandbox.files.move("/mv/src.txt", "/mv/dst.txt"), { status: "moved" });
    assert.equal(await sandbox.files.readText("/mv/dst.txt"), "moved");
    assert.equal(await sandbox.files.exists("/mv/src.txt"), false);
    assert.deepEqual(await sandbox.files.chmod("/mv/dst.txt", "700"), { status: "chmod applied" });
    assert.equal((await sandbox.files.stat("/mv/dst.txt")).mode, "0700");
    await sandbox.files.chmod("/mv/dst.txt", 0o644);
    assert.equal((await sandbox.files.stat("/mv/dst.txt")).mode, "0644");
    await assert.rejects(sandbox.files.remove("/mv"), BadRequestError);
    assert.deepEqual(await sandbox.files.remove("/mv", { recursive: true }), { status: "deleted" });
    assert.equal(await sandbox.files.exists("/mv"), false);
    await sandbox.files.write("/single.txt", "x");
    await sandbox.files.remove("/single.txt");
    assert.equal(await sandbox.files.exists("/single.txt"), false);
  });

  it("maps file errors to typed errors", async () => {
    await assert.rejects(sandbox.files.read("/does/not/exist"), NotFoundError);
    await assert.rejects(sandbox.files.read("relative/path"), (err: unknown) => {
      assert.ok(err instanceof BadRequestError);
      assert.equal(err.status, 400);
      assert.match(err.message, /absolute/);
      return true;
    });
    await assert.rejects(sandbox.files.move("/nope-src", "/nope-dst"), NotFoundError);
  });

  it("uploads and downloads a directory byte-for-byte", async () => {
    const src = path.join(local, "src");
    mkdirSync(path.join(src, "nested", "deeper"), { recursive: true });
    mkdirSync(path.join(src, "empty-dir"));
    writeFileSync(path.join(src, "top.txt"), "top level\n");
    writeFileSync(path.join(src, "empty.txt"), "");
    writeFileSync(path.join(src, "nested", "random.bin"), randomBytes(200_000));
    writeFileSync(path.join(src, "nested", "deeper", "ünïcode name.txt"), "ü\n");
    writeFileSync(path.join(src, "run.sh"), "#!/bin/sh\necho hi\n");
    chmodSync(path.join(src, "run.sh"), 0o755);
    const extracted = await sandbox.files.uploadDir(src, "/up/dir");
    assert.equal(extracted.status, "extracted");
    assert.equal(extracted.entries, 8); // 3 directories and 5 files
    assert.equal(await sandbox.files.readText("/up/dir/top.txt"), "top level\n");
    assert.equal((await sandbox.files.stat("/up/dir/run.sh")).mode, "0755");
    assert.equal((await sandbox.files.stat("/up/dir/empty-dir")).is_dir, true);
    const run = await sandbox.commands.run("./run.sh", { workdir: "/up/dir" });
    assert.equal(run.stdout, "hi\n");

    const dest = path.join(local, "dest");
    await sandbox.files.downloadDir("/up/dir", dest);
    assert.deepEqual(tree(dest), tree(src));
    assert.equal(statSync(path.join(dest, "run.sh")).mode & 0o777, 0o755);
    await assert.rejects(sandbox.files.downloadDir("/no/such/dir", path.join(local, "x")), NotFoundError);
  });
});
