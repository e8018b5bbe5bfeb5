// sandbox.files: streamed reads and writes (PUT /files raw body, GET with Range), list, stat,
// glob, move, chmod, remove, and directory transfer through /files/archive (tar).
import { mkdir, readdir } from "node:fs/promises";
import { Readable, Writable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { create as tarCreate, extract as tarExtract } from "tar";
import type { RawBody, SvcClient } from "./client.js";
import { NotFoundError } from "./errors.js";
import type { Extracted, FileInfo, StatusBody, Written } from "./types.js";

/** A byte range of a read: `start` (inclusive, default 0) to `end` (inclusive, default the last byte). */
export interface ReadRange {
  start?: number;
  end?: number;
}

/** What `write` accepts: text, bytes, a Blob, a web ReadableStream, a Node Readable or any async iterable of bytes. */
export type WriteData = RawBody | Readable;

function rangeHeader(range: ReadRange | undefined): Record<string, string> {
  if (!range || (range.start === undefined && range.end === undefined)) return {};
  const start = range.start ?? 0;
  return { Range: `bytes=${start}-${range.end ?? ""}` };
}

/** A file mode as the server wants it: octal digits (`0644`); numbers are taken as mode bits (0o755). */
function toMode(mode: string | number): string {
  return typeof mode === "number" ? mode.toString(8).padStart(4, "0") : mode;
}

/** Files of one sandbox. Paths are absolute inside the sandbox. */
export class Files {
  constructor(
    readonly client: SvcClient,
    readonly sandboxId: string,
  ) {}

  /** A file's bytes (or a range of them). */
  async read(path: string, options: { range?: ReadRange; signal?: AbortSignal } = {}): Promise<Uint8Array> {
    const response = await this.client.fetch("fileRead", {
      params: { id: this.sandboxId },
      query: { path },
      headers: rangeHeader(options.range),
      ...(options.signal ? { signal: options.signal } : {}),
    });
    return new Uint8Array(await response.arrayBuffer());
  }

  /** A file's content decoded as UTF-8. */
  async readText(path: string, options: { range?: ReadRange; signal?: AbortSignal } = {}): Promise<string> {
    return new TextDecoder().decode(await this.read(path, options));
  }

  /** A file as a web ReadableStream, streamed from the server (never held whole in memory). */
  async readStream(path: string, options: { range?: ReadRange; signal?: AbortSignal } = {}): Promise<ReadableStream<Uint8Array>> {
    const response = await this.client.fetch("fileRead", {
      params: { id: this.sandboxId },
      query: { path },
      headers: rangeHeader(options.range),
      ...(options.signal ? { signal: options.signal } : {}),
    });
    return response.body ?? new ReadableStream<Uint8Array>({ start: (c) => c.close() });
  }

  /** Streams a file into a Node Writable (a file stream, a socket, ...) or a web WritableStream. */
  async readTo(path: string, destination: Writable | WritableStream<Uint8Array>, options: { range?: ReadRange; signal?: AbortSignal } = {}): Promise<void> {
    const stream = await this.readStream(path, options);
    if (destination instanceof WritableStream) {
      await stream.pipeTo(destination);
    } else {
      await pipeline(Readable.fromWeb(stream as import("node:stream/web").ReadableStream<Uint8Array>), destination);
    }
  }

  /** Writes a file from text, bytes or a stream (`PUT /files`, streamed; parent directories are
   *  created; the file is replaced only once the upload is complete). */
  async write(path: string, data: WriteData, options: { mode?: string | number; signal?: AbortSignal } = {}): Promise<Written> {
    return this.client.json("fileUpload", {
      params: { id: this.sandboxId },
      query: options.mode === undefined ? { path } : { path, mode: toMode(options.mode) },
      raw: data as RawBody,
      ...(options.signal ? { signal: options.signal } : {}),
    });
  }

  /** Writes a small file in one JSON request (`POST /files`); `base64` content for binary data. */
  async writeJson(path: string, content: string, options: { mode?: string | number; encoding?: "utf8" | "base64" } = {}): Promise<StatusBody> {
    return this.client.json("fileWrite", {
      params: { id: this.sandboxId },
      body: {
        path,
        content,
        ...(options.mode === undefined ? {} : { mode: toMode(options.mode) }),
        ...(options.encoding ? { encoding: options.encoding } : {}),
      },
    });
  }

  /** Writes text as UTF-8 (same as `write` with a string). */
  async writeText(path: string, text: string, options: { mode?: string | number } = {}): Promise<Written> {
    return this.write(path, text, options);
  }

  /** Creates a directory and its parents (an empty archive extracted there). */
  async makeDir(path: string): Promise<void> {
    await this.uploadArchive(path, new Uint8Array(1024)); // a tar with only its end-of-archive blocks
  }

  /** Entries of a directory, sorted by name (default `/`). */
  async list(path = "/"): Promise<FileInfo[]> {
    return this.client.json("fileList", { params: { id: this.sandboxId }, query: { path } });
  }

  /** One file's or directory's info. */
  async stat(path: string): Promise<FileInfo> {
    return this.client.json("fileStat", { params: { id: this.sandboxId }, query: { path } });
  }

  /** True when the path exists. */
  async exists(path: string): Promise<boolean> {
    try {
      await this.stat(path);
      return true;
    } catch (err) {
      if (err instanceof NotFoundError) return false;
      throw err;
    }
  }

  /** Absolute paths matching a pattern (`*`, `?`, `[...]`, `**`), sorted. */
  async glob(pattern: string): Promise<string[]> {
    return this.client.json("fileGlob", { params: { id: this.sandboxId }, query: { pattern } });
  }

  /** Moves (renames) a file or directory; an existing destination file is replaced. */
  async move(oldPath: string, newPath: string): Promise<StatusBody> {
    return this.client.json("fileMove", {
      params: { id: this.sandboxId },
      body: { old_path: oldPath, new_path: newPath },
    });
  }

  /** Changes permission bits: `"0755"`, `"755"` or `0o755`. */
  async chmod(path: string, mode: string | number): Promise<StatusBody> {
    return this.client.json("fileChmod", {
      params: { id: this.sandboxId },
      body: { path, mode: toMode(mode) },
    });
  }

  /** Removes a file, or a directory (`recursive` for a non-empty one). */
  async remove(path: string, options: { recursive?: boolean } = {}): Promise<StatusBody> {
    return this.client.json("fileRemove", {
      params: { id: this.sandboxId },
      query: { path, recursive: options.recursive ?? false },
    });
  }

  /** A directory as a tar stream (names relative to it). */
  async downloadArchive(path: string, options: { signal?: AbortSignal } = {}): Promise<ReadableStream<Uint8Array>> {
    const response = await this.client.fetch("archiveRead", {
      params: { id: this.sandboxId },
      query: { path },
      ...(options.signal ? { signal: options.signal } : {}),
    });
    return response.body ?? new ReadableStream<Uint8Array>({ start: (c) => c.close() });
  }

  /** Extracts a tar stream into a directory (created when missing). */
  async uploadArchive(path: string, tar: WriteData, options: { signal?: AbortSignal } = {}): Promise<Extracted> {
    return this.client.json("archiveWrite", {
      params: { id: this.sandboxId },
      query: { path },
      raw: tar as RawBody,
      contentType: "application/x-tar",
      ...(options.signal ? { signal: options.signal } : {}),
    });
  }

  /** Uploads a local directory's content into a sandbox directory (streamed as tar). */
  async uploadDir(localDir: string, remoteDir: string, options: { signal?: AbortSignal } = {}): Promise<Extracted> {
    const names = await readdir(localDir);
    const pack = tarCreate({ cwd: localDir, portable: true }, names.length ? names.sort() : ["."]);
    return this.uploadArchive(remoteDir, pack as unknown as AsyncIterable<Uint8Array>, options);
  }

  /** Downloads a sandbox directory's content into a local directory (created when missing). */
  async downloadDir(remoteDir: string, localDir: string, options: { signal?: AbortSignal } = {}): Promise<void> {
    await mkdir(localDir, { recursive: true });
    const stream = await this.downloadArchive(remoteDir, options);
    const unpack = tarExtract({ cwd: localDir, strict: true });
    const done = new Promise<void>((resolve, reject) => {
      unpack.on("error", reject);
      unpack.on("close", () => resolve());
    });
    for await (const chunk of stream as unknown as AsyncIterable<Uint8Array>) {
      if (!unpack.write(Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength))) {
        await new Promise<void>((resolve) => unpack.once("drain", () => resolve()));
      }
    }
    unpack.end();
    await done;
  }
}
