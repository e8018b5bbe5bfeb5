// Templates (`/templates`) and their image builds (`/templates/{name}/build`, `.../builds`).
import { readdir } from "node:fs/promises";
import { Header, Pax, create as tarCreate } from "tar";
import { SvcClient, readNdjson, toDuration, toEgress, type ConnectionOptions, type EgressInput } from "./client.js";
import { BuildError, ConflictError, SvcConnectionError, SvcError, SvcTimeoutError } from "./errors.js";
import { Sandbox } from "./sandbox.js";
import type {
  BuildAccepted,
  BuildLogLine,
  BuildRequest,
  StatusBody,
  Template,
  TemplateBuild,
  TemplateSpawnRequest,
  TemplateSpec,
} from "./types.js";

/** Template fields (the server's `TemplateSpec`; `ttl` may also be seconds). */
export interface TemplateInput extends Omit<TemplateSpec, "ttl" | "name" | "egress"> {
  ttl?: string | number;
  /** What its sandboxes may connect to (see {@link EgressInput}). */
  egress?: EgressInput;
}

function specBody(input: TemplateInput, name?: string): TemplateSpec {
  const body: TemplateSpec = {};
  if (name !== undefined) body.name = name;
  if (input.tenant_id !== undefined) body.tenant_id = input.tenant_id;
  if (input.image !== undefined) body.image = input.image;
  if (input.provider !== undefined) body.provider = input.provider;
  if (input.memory_mb !== undefined) body.memory_mb = input.memory_mb;
  if (input.vcpus !== undefined) body.vcpus = input.vcpus;
  if (input.metadata !== undefined) body.metadata = input.metadata;
  if (input.warm_pool !== undefined) body.warm_pool = input.warm_pool;
  if (input.egress !== undefined) body.egress = toEgress(input.egress);
  if (input.ttl !== undefined && input.ttl !== null) body.ttl = toDuration(input.ttl);
  return body;
}

/** A build's context: a Dockerfile's text with files (sent as JSON), or a local directory (sent as tar). */
export interface BuildInput {
  /** The Dockerfile's text; with `contextDir` it replaces the directory's own `Dockerfile`. */
  dockerfile?: string;
  /** Context files: path (relative to the context) → text or bytes (any bytes: all sent base64). */
  files?: Record<string, string | Uint8Array>;
  /** A local directory sent as the context (a tar stream): its `Dockerfile`, plus `files`. */
  contextDir?: string;
  signal?: AbortSignal;
}

export type BuildLogCallback = (line: BuildLogLine) => void;

export interface BuildOptions extends BuildInput {
  /** Called with each log line as it arrives (`step`, `output`, `progress`, and last `result`). */
  onLog?: BuildLogCallback;
  /** After this many milliseconds the build is cancelled and SvcTimeoutError thrown. */
  timeoutMs?: number;
}

/** Times a build's log stream may break before `build` gives up. */
const BUILD_RECONNECTS = 5;

/** Tar entries (ustar; a PAX header for long names) of in-memory files. */
function* tarEntries(files: Map<string, Uint8Array>): Generator<Uint8Array> {
  const mtime = new Date();
  for (const [path, data] of files) {
    const header = new Header({ path, mode: 0o644, size: data.byteLength, mtime, type: "File" });
    header.encode();
    if (header.needPax) yield new Pax({ path, mtime, size: data.byteLength }).encode();
    yield header.block!;
    yield data;
    if (data.byteLength % 512) yield new Uint8Array(512 - (data.byteLength % 512));
  }
}

/** `dir` as a tar stream, `extra` files first, replacing the directory's entries of the same name. */
async function* contextTar(dir: string, extra: Map<string, Uint8Array>): AsyncGenerator<Uint8Array> {
  const names = (await readdir(dir)).filter((name) => !extra.has(name)).sort();
  yield* tarEntries(extra);
  if (!names.length) {
    yield new Uint8Array(1024); // the end-of-archive blocks
    return;
  }
  const filter = (path: string) => !extra.has(path.replace(/^\.\//, ""));
  yield* tarCreate({ cwd: dir, portable: true, filter }, names) as unknown as AsyncIterable<Uint8Array>;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

export class Templates {
  readonly client: SvcClient;

  constructor(options: ConnectionOptions = {}) {
    this.client = SvcClient.from(options);
  }

  /**
   * Creates a template; ConflictError when the name exists. An OIDC caller's template belongs to
   * its tenant; an API-key or admin caller's is global unless `tenant_id` names a tenant.
   */
  async create(name: string, input: TemplateInput = {}): Promise<Template> {
    return this.client.json("templateCreate", { body: specBody(input, name) });
  }

  async list(): Promise<Template[]> {
    return this.client.listAll("templateList");
  }

  async get(name: string): Promise<Template> {
    return this.client.json("templateGet", { params: { name } });
  }

  /** Replaces a template's fields; its tenant stays. */
  async update(name: string, input: TemplateInput): Promise<Template> {
    return this.client.json("templateUpdate", { params: { name }, body: specBody(input) });
  }

  async delete(name: string): Promise<StatusBody> {
    return this.client.json("templateDelete", { params: { name } });
  }

  /** Spawns a sandbox from the template, from its warm pool when one is ready. */
  async spawn(
    name: string,
    options: { ttl?: string | number; provider?: string; env?: Record<string, string>; metadata?: Record<string, string> } = {},
  ): Promise<Sandbox> {
    const body: TemplateSpawnRequest = {};
    if (options.ttl !== undefined) body.ttl = toDuration(options.ttl);
    if (options.provider !== undefined) body.provider = options.provider;
    if (options.env !== undefined) body.env = options.env;
    if (options.metadata !== undefined) body.metadata = options.metadata;
    const info = await this.client.json("templateSpawn", { params: { name }, body });
    return new Sandbox(this.client, info);
  }

  /**
   * Builds the template's image from a Dockerfile and waits for the build: starts it (see
   * {@link startBuild}), passes each log line to `onLog`, and answers the ended build, whose
   * `image` the template now uses. A build that failed or was cancelled throws {@link BuildError}
   * (its `build` says why); after `timeoutMs` the build is cancelled and SvcTimeoutError thrown.
   */
  async build(name: string, options: BuildOptions): Promise<TemplateBuild> {
    const { build_id: buildId } = await this.startBuild(name, options);
    const params = { name, build_id: buildId };
    const deadline = options.timeoutMs === undefined ? undefined : Date.now() + options.timeoutMs;
    let seen = 0; // lines passed on: a reconnect replays the log from its start
    let failures = 0;
    for (;;) {
      const controller = new AbortController();
      const onAbort = () => controller.abort(options.signal?.reason);
      options.signal?.addEventListener("abort", onAbort, { once: true });
      const timer = deadline === undefined ? undefined : setTimeout(() => controller.abort(), Math.max(0, deadline - Date.now()));
      let ended = false;
      let broke: unknown;
      try {
        const response = await this.client.fetch("templateBuildLogs", { params, query: { follow: true }, signal: controller.signal });
        let index = 0;
        for await (const line of readNdjson<BuildLogLine>(response)) {
          if (++index <= seen) continue;
          seen = index;
          options.onLog?.(line);
          if (line.type === "result") {
            ended = true;
            break;
          }
        }
      } catch (err) {
        if (options.signal?.aborted) throw options.signal.reason ?? err;
        if (!controller.signal.aborted) {
          if (err instanceof SvcError && !(err instanceof SvcConnectionError) && err.status < 500) throw err;
          broke = err; // the stream broke: follow it again
        }
      } finally {
        clearTimeout(timer);
        options.signal?.removeEventListener("abort", onAbort);
        controller.abort(); // closes a body not read to its end
      }
      if (ended) break;
      if (deadline !== undefined && Date.now() >= deadline) {
        await this.cancelBuild(name, buildId).catch((err: unknown) => {
          if (!(err instanceof ConflictError)) throw err; // it ended meanwhile
        });
        throw new SvcTimeoutError(`build ${buildId} of ${JSON.stringify(name)} still running after ${options.timeoutMs}ms`, "timeout", 0);
      }
      if (++failures > BUILD_RECONNECTS) {
        throw new SvcConnectionError(`log of build ${buildId} ended without its result${broke ? `: ${(broke as Error).message}` : ""}`, "connection_error", 0, undefined, { cause: broke });
      }
      await sleep(Math.min(100 * 2 ** failures, 2000));
    }
    const record = await this.getBuild(name, buildId);
    if (record.status !== "succeeded") throw new BuildError(record);
    return record;
  }

  /**
   * Starts a build (`POST /templates/{name}/build`) and answers at once (`{build_id, status}`).
   * The context is `dockerfile` with `files` (sent as JSON), or with `contextDir` a local directory
   * (sent as tar) plus `files`. BadRequestError for a bad context (absolute names, `..`),
   * UnavailableError when the server has no Docker engine.
   */
  async startBuild(name: string, input: BuildInput): Promise<BuildAccepted> {
    const signal = input.signal ? { signal: input.signal } : {};
    const files = Object.entries(input.files ?? {});
    if (input.contextDir !== undefined) {
      const extra = new Map(files.map(([path, data]) => [path, typeof data === "string" ? new TextEncoder().encode(data) : data]));
      if (input.dockerfile !== undefined) extra.set("Dockerfile", new TextEncoder().encode(input.dockerfile));
      return this.client.json<"templateBuild", BuildAccepted>("templateBuild", {
        params: { name },
        raw: contextTar(input.contextDir, extra),
        contentType: "application/x-tar",
        ...signal,
      });
    }
    if (input.dockerfile === undefined) throw new TypeError("a build needs a dockerfile or a contextDir");
    const body: BuildRequest = { dockerfile: input.dockerfile };
    if (files.length) {
      if (files.some(([, data]) => typeof data !== "string")) {
        body.files = Object.fromEntries(files.map(([path, data]) => [path, Buffer.from(data).toString("base64")]));
        body.encoding = "base64";
      } else {
        body.files = Object.fromEntries(files) as Record<string, string>;
      }
    }
    return this.client.json<"templateBuild", BuildAccepted>("templateBuild", { params: { name }, body, ...signal });
  }

  /** The template's builds, newest first. */
  async listBuilds(name: string): Promise<TemplateBuild[]> {
    return this.client.json("templateBuildList", { params: { name } });
  }

  async getBuild(name: string, buildId: string): Promise<TemplateBuild> {
    return this.client.json("templateBuildGet", { params: { name, build_id: buildId } });
  }

  /** Cancels a running build (the template keeps its image); ConflictError once it has ended. */
  async cancelBuild(name: string, buildId: string): Promise<TemplateBuild> {
    return this.client.json("templateBuildCancel", { params: { name, build_id: buildId } });
  }

  /** A build's log lines from its start; with `follow` (default) new ones until the `result` line,
   *  the last; without, only what is there now. */
  async *buildLogs(name: string, buildId: string, options: { follow?: boolean; signal?: AbortSignal } = {}): AsyncGenerator<BuildLogLine> {
    const response = await this.client.fetch("templateBuildLogs", {
      params: { name, build_id: buildId },
      query: { follow: options.follow ?? true },
      ...(options.signal ? { signal: options.signal } : {}),
    });
    yield* readNdjson<BuildLogLine>(response);
  }
}
