// The Sandbox class: create / connect / get / list / destroy / extend, plus its commands, files
// and PTY sessions. `await using sandbox = await Sandbox.create(...)` destroys it at scope end;
// `Sandbox.with(options, fn)` does the same for a callback.
import { SvcClient, toDuration, toEgress, type ConnectionOptions, type EgressInput } from "./client.js";
import { Commands } from "./commands.js";
import { NotFoundError } from "./errors.js";
import { Files } from "./files.js";
import { Pty } from "./pty.js";
import { EventStream, type EventsOptions } from "./events.js";
import type { Admission, PreviewToken, SandboxInfo, SandboxState, SandboxStats, SpawnRequest, StatusBody } from "./types.js";

/** Spawn fields (the server's `SpawnRequest`; `ttl` may also be seconds) plus connection options. */
export interface SandboxCreateOptions extends Omit<SpawnRequest, "ttl" | "egress">, ConnectionOptions {
  /** Time to live: a duration string (`30m`) or seconds. */
  ttl?: string | number;
  /** What the sandbox may connect to: `"none"`, a list of allowed destinations, or `{mode, allow}`. */
  egress?: EgressInput;
}

export interface SandboxListOptions extends ConnectionOptions {
  /** `running` (default: every non-destroyed state), `destroyed`, `paused`, or `all`. */
  state?: SandboxState | "all";
  owner_id?: string;
  provider?: string;
}

const CONNECTION_KEYS = ["url", "apiKey", "token", "userId", "headers", "client"] as const;

function spawnBody(options: SandboxCreateOptions): SpawnRequest {
  const body: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(options)) {
    if (value === undefined || (CONNECTION_KEYS as readonly string[]).includes(key)) continue;
    if (key === "ttl") body[key] = toDuration(value as string | number);
    else if (key === "egress") body[key] = toEgress(value as EgressInput);
    else body[key] = value;
  }
  return body as SpawnRequest;
}

/** One sandbox. */
export class Sandbox {
  /** The record as last fetched (by create, connect, refresh or extend). */
  info: SandboxInfo;
  /** Run commands (buffered, streamed, background). */
  readonly commands: Commands;
  /** Read and write files. */
  readonly files: Files;
  /** Terminal sessions over the WebSocket. */
  readonly pty: Pty;

  constructor(
    readonly client: SvcClient,
    info: SandboxInfo,
  ) {
    this.info = info;
    this.commands = new Commands(client, info.id);
    this.files = new Files(client, info.id);
    this.pty = new Pty(client, info.id);
  }

  /** `sb-` + 16 hex. */
  get id(): string {
    return this.info.id;
  }

  /** Spawns a sandbox (`POST /sandboxes`). */
  static async create(options: SandboxCreateOptions = {}): Promise<Sandbox> {
    const client = SvcClient.from(options);
    const info = await client.json("sandboxCreate", { body: spawnBody(options) });
    return new Sandbox(client, info);
  }

  /** Attaches to an existing sandbox by ID (NotFoundError when there is none). */
  static async connect(id: string, options: ConnectionOptions = {}): Promise<Sandbox> {
    const client = SvcClient.from(options);
    return new Sandbox(client, await client.json("sandboxGet", { params: { id } }));
  }

  /** A sandbox's record (destroyed ones too, until the retention passes). */
  static async get(id: string, options: ConnectionOptions = {}): Promise<SandboxInfo> {
    return SvcClient.from(options).json("sandboxGet", { params: { id } });
  }

  /**
   * Sandboxes, newest first (by default the non-destroyed ones): every page, following the
   * server's `X-Next-Cursor` (it answers at most 1000 at a time).
   */
  static async list(options: SandboxListOptions = {}): Promise<SandboxInfo[]> {
    const query: Record<string, string> = {};
    if (options.state) query.state = options.state;
    if (options.owner_id) query.owner_id = options.owner_id;
    if (options.provider) query.provider = options.provider;
    return SvcClient.from(options).listAll("sandboxList", { query });
  }

  /** Destroys a sandbox by ID (idempotent: a destroyed one answers `destroyed` again). */
  static async destroy(id: string, options: ConnectionOptions = {}): Promise<StatusBody> {
    return SvcClient.from(options).json("sandboxDestroy", { params: { id } });
  }

  /** Sets a sandbox's `expires_at` to now + ttl. */
  static async extend(id: string, ttl: string | number, options: ConnectionOptions = {}): Promise<SandboxInfo> {
    return SvcClient.from(options).json("sandboxExtend", { params: { id }, body: { ttl: toDuration(ttl) } });
  }

  /** Freezes a sandbox's processes (idempotent); it does not expire while paused. */
  static async pause(id: string, options: ConnectionOptions = {}): Promise<SandboxInfo> {
    return SvcClient.from(options).json("sandboxPause", { params: { id } });
  }

  /** Thaws a paused sandbox (idempotent); `expires_at` moves by the time it spent paused. */
  static async resume(id: string, options: ConnectionOptions = {}): Promise<SandboxInfo> {
    return SvcClient.from(options).json("sandboxResume", { params: { id } });
  }

  /**
   * A link to `port` inside a sandbox (`POST /sandboxes/{id}/preview-tokens`): `url` plus a `token`
   * that opens only this sandbox and port until `expires_at` (as `?svc_preview_token=`).
   */
  static async preview(id: string, port: number, options: { ttl?: string | number } & ConnectionOptions = {}): Promise<PreviewToken> {
    const body: { port: number; ttl?: string } = { port };
    if (options.ttl !== undefined) body.ttl = toDuration(options.ttl);
    return SvcClient.from(options).json("previewTokenCreate", { params: { id }, body });
  }

  /** Destroys every expired sandbox the caller sees; answers how many. */
  static async prune(options: ConnectionOptions = {}): Promise<number> {
    return (await SvcClient.from(options).json("sandboxPrune")).pruned;
  }

  /** Would this spawn be admitted? Creates nothing. */
  static async admission(options: SandboxCreateOptions = {}): Promise<Admission> {
    return SvcClient.from(options).json("sandboxAdmission", { body: spawnBody(options) });
  }

  /** Creates a sandbox, runs `fn` with it and destroys it afterwards, whatever `fn` did. */
  static async with<T>(options: SandboxCreateOptions, fn: (sandbox: Sandbox) => Promise<T> | T): Promise<T> {
    const sandbox = await Sandbox.create(options);
    try {
      return await fn(sandbox);
    } finally {
      await sandbox.destroy();
    }
  }

  /** Fetches the current record. */
  async refresh(): Promise<SandboxInfo> {
    this.info = await this.client.json("sandboxGet", { params: { id: this.id } });
    return this.info;
  }

  /** Same as {@link refresh}. */
  async getInfo(): Promise<SandboxInfo> {
    return this.refresh();
  }

  /** Events of this sandbox; resolves once subscribed. */
  events(options: Pick<EventsOptions, "types" | "lastEventId" | "signal" | "resumeOnOverflow"> = {}): Promise<EventStream> {
    return EventStream.open({ ...options, sandboxId: this.id, client: this.client });
  }

  /** True while the sandbox is `running` (fetches the record). */
  async isRunning(): Promise<boolean> {
    return (await this.refresh()).state === "running";
  }

  /** Sets `expires_at` to now + ttl (a duration string or seconds). */
  async extend(ttl: string | number): Promise<SandboxInfo> {
    this.info = await Sandbox.extend(this.id, ttl, { client: this.client });
    return this.info;
  }

  /** Freezes the sandbox's processes; commands and files answer ConflictError until resumed. */
  async pause(): Promise<SandboxInfo> {
    this.info = await Sandbox.pause(this.id, { client: this.client });
    return this.info;
  }

  /** Thaws a paused sandbox. */
  async resume(): Promise<SandboxInfo> {
    this.info = await Sandbox.resume(this.id, { client: this.client });
    return this.info;
  }

  /** Destroys the sandbox (idempotent). */
  async destroy(): Promise<StatusBody> {
    return Sandbox.destroy(this.id, { client: this.client });
  }

  /** A link and token for `port` inside this sandbox (a web server it runs, say). */
  async preview(port: number, options: { ttl?: string | number } = {}): Promise<PreviewToken> {
    return Sandbox.preview(this.id, port, { ...options, client: this.client });
  }

  /**
   * `<port>-<id>.<preview_domain>`: the host name svc proxies to `port` (needs wildcard DNS for the
   * preview domain; without it, use the `/proxy/{port}/` path form).
   */
  getHost(port: number): string {
    // the record's preview_domain is `<id>.<server's preview domain>`
    const prefix = `${this.id}.`;
    const domain = this.info.preview_domain.startsWith(prefix) ? this.info.preview_domain.slice(prefix.length) : this.info.preview_domain;
    return `${port}-${this.id}.${domain}`;
  }

  /** Console/log lines, most recent `lines` (default 100), in order. */
  async logs(options: { lines?: number } = {}): Promise<string[]> {
    return this.client.json("sandboxLogs", {
      params: { id: this.id },
      query: options.lines === undefined ? {} : { lines: options.lines },
    });
  }

  /** Resource usage now (providers with the `stats` capability). */
  async stats(): Promise<SandboxStats> {
    return this.client.json("sandboxStats", { params: { id: this.id } });
  }

  /** `await using`: destroys the sandbox when the scope ends (a sandbox already gone is fine). */
  async [Symbol.asyncDispose](): Promise<void> {
    try {
      await this.destroy();
    } catch (err) {
      if (!(err instanceof NotFoundError)) throw err;
    }
  }
}
