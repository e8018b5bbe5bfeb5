// sandbox.commands: buffered and streamed runs, background execs with handles that wait, kill,
// send stdin and reattach through the exec's output replay (byte offsets) without losing output.
import { SvcConnectionError, SvcError } from "./errors.js";
import { readNdjson, toDuration, type SvcClient } from "./client.js";
import type {
  ExecOutputLine,
  ExecRecord,
  ExecRequest,
  ExecResult,
  ExecStarted,
  ExecStreamLine,
  OnDisconnect,
  StatusBody,
} from "./types.js";

/** What a finished command left. */
export interface CommandResult {
  /** `ex-` + 16 hex. */
  execId: string;
  exitCode: number;
  /** Output seen by this call (for a reattached handle: from its start offsets on). */
  stdout: string;
  stderr: string;
  /** Go-style duration (`1.5s`). */
  duration: string;
  /** True when the command's deadline killed it (exit code 124). */
  timedOut: boolean;
}

export type OutputCallback = (data: string) => void;

export interface RunOptions {
  /** Arguments: when given, the command is the program and runs without a shell. */
  args?: string[];
  /** Extra environment. */
  env?: Record<string, string>;
  /** Working directory inside the sandbox. */
  workdir?: string;
  /** Deadline: a duration string (`30s`) or seconds. Default: the server's `default_exec_timeout`
   *  (none for background commands). */
  timeout?: string | number;
  /** Called with each stdout chunk as it arrives (makes the run streamed). */
  onStdout?: OutputCallback;
  /** Called with each stderr chunk as it arrives (makes the run streamed). */
  onStderr?: OutputCallback;
  /** Stream output (NDJSON) even without callbacks. */
  stream?: boolean;
  /** Streamed runs: what happens when the connection drops: `kill` (default) or `continue`. */
  onDisconnect?: OnDisconnect;
  /** Start in the background and answer a {@link CommandHandle} at once. */
  background?: boolean;
  /** Aborts a foreground run (the server kills the command when the client goes away). */
  signal?: AbortSignal;
}

export interface ConnectOptions {
  onStdout?: OutputCallback;
  onStderr?: OutputCallback;
  /** Byte offset in stdout to resume from (default 0: everything the server kept). */
  stdoutOffset?: number;
  /** Byte offset in stderr to resume from (default 0). */
  stderrOffset?: number;
}

export type SignalName = "SIGINT" | "SIGTERM" | "SIGKILL" | "SIGHUP" | "INT" | "TERM" | "KILL" | "HUP";

const encoder = new TextEncoder();
const byteLength = (text: string): number => encoder.encode(text).length;

/** Commands of one sandbox. */
export class Commands {
  constructor(
    readonly client: SvcClient,
    readonly sandboxId: string,
  ) {}

  /** Runs a command. Buffered by default; streamed when `onStdout`/`onStderr`/`stream` is given;
   *  with `background: true` answers a {@link CommandHandle} at once. */
  run(command: string, options: RunOptions & { background: true }): Promise<CommandHandle>;
  run(command: string, options?: RunOptions & { background?: false }): Promise<CommandResult>;
  run(command: string, options: RunOptions): Promise<CommandResult | CommandHandle>;
  async run(command: string, options: RunOptions = {}): Promise<CommandResult | CommandHandle> {
    const body: ExecRequest = { command };
    if (options.args) body.args = options.args;
    if (options.env) body.env = options.env;
    if (options.workdir) body.workdir = options.workdir;
    if (options.timeout !== undefined) body.timeout = toDuration(options.timeout);
    if (options.background) {
      body.background = true;
      const started = await this.client.json<"exec", ExecStarted>("exec", {
        params: { id: this.sandboxId },
        body,
        ...(options.signal ? { signal: options.signal } : {}),
      });
      const connect: ConnectOptions = {};
      if (options.onStdout) connect.onStdout = options.onStdout;
      if (options.onStderr) connect.onStderr = options.onStderr;
      return new CommandHandle(this, started.exec_id, connect);
    }
    if (options.onStdout || options.onStderr || options.stream) {
      body.stream = true;
      if (options.onDisconnect) body.on_disconnect = options.onDisconnect;
      return this.runStreamed(body, options);
    }
    const result = await this.client.json<"exec", ExecResult>("exec", {
      params: { id: this.sandboxId },
      body,
      ...(options.signal ? { signal: options.signal } : {}),
    });
    return {
      execId: result.exec_id,
      exitCode: result.exit_code,
      stdout: result.stdout,
      stderr: result.stderr,
      duration: result.duration,
      timedOut: result.timed_out,
    };
  }

  private async runStreamed(body: ExecRequest, options: RunOptions): Promise<CommandResult> {
    const response = await this.client.fetch("exec", {
      params: { id: this.sandboxId },
      body,
      ...(options.signal ? { signal: options.signal } : {}),
    });
    const execId = response.headers.get("x-exec-id") ?? "";
    let stdout = "";
    let stderr = "";
    try {
      for await (const line of readNdjson<ExecStreamLine>(response)) {
        if (line.stream === "stdout") {
          stdout += line.data;
          options.onStdout?.(line.data);
        } else if (line.stream === "stderr") {
          stderr += line.data;
          options.onStderr?.(line.data);
        } else if (line.stream === "exit") {
          let timedOut = false;
          if (line.exit_code === 124 && execId) {
            timedOut = (await this.get(execId)).status === "timed_out";
          }
          return { execId, exitCode: line.exit_code, stdout, stderr, duration: line.duration, timedOut };
        }
      }
    } catch (err) {
      if (options.signal?.aborted) throw options.signal.reason ?? err;
      throw new SvcConnectionError(`exec ${execId}: output stream broke: ${(err as Error).message}`, "connection_error", 0, undefined, { cause: err });
    }
    throw new SvcConnectionError(`exec ${execId}: output stream ended before the command exited`, "connection_error", 0);
  }

  /** Reattaches to a running (or ended) exec: replays its output from the given byte offsets. */
  connect(execId: string, options: ConnectOptions = {}): CommandHandle {
    return new CommandHandle(this, execId, options);
  }

  /** The sandbox's execs, newest first (foreground ones too): every page. */
  async list(): Promise<ExecRecord[]> {
    return this.client.listAll("execList", { params: { id: this.sandboxId } });
  }

  /** One exec's record. */
  async get(execId: string): Promise<ExecRecord> {
    return this.client.json("execGet", { params: { id: this.sandboxId, exec_id: execId } });
  }

  /** Kills a running exec (`{status: "killed"}`); 409 ConflictError once it has ended. */
  async kill(execId: string): Promise<StatusBody> {
    return this.client.json("execKill", { params: { id: this.sandboxId, exec_id: execId } });
  }

  /** Writes to a running exec's stdin; `eof` closes it afterwards. */
  async sendStdin(execId: string, data: string, options: { eof?: boolean } = {}): Promise<StatusBody> {
    return this.client.json("execStdin", {
      params: { id: this.sandboxId, exec_id: execId },
      body: { data, eof: options.eof ?? false },
    });
  }

  /** Sends a signal to a running exec (it then exits with 128+N). */
  async signal(execId: string, signal: SignalName): Promise<StatusBody> {
    return this.client.json("execSignal", {
      params: { id: this.sandboxId, exec_id: execId },
      body: { signal },
    });
  }

  /** Reads an exec's output lines from the given offsets; `follow` waits for live output. */
  async *output(
    execId: string,
    options: { stdoutOffset?: number; stderrOffset?: number; follow?: boolean; signal?: AbortSignal } = {},
  ): AsyncGenerator<ExecOutputLine> {
    const response = await this.client.fetch("execOutput", {
      params: { id: this.sandboxId, exec_id: execId },
      query: {
        stdout_offset: options.stdoutOffset ?? 0,
        stderr_offset: options.stderrOffset ?? 0,
        follow: options.follow ?? true,
      },
      ...(options.signal ? { signal: options.signal } : {}),
    });
    yield* readNdjson<ExecOutputLine>(response);
  }
}

/** Errors after which following an exec's output is retried from the offsets reached. */
function retryable(err: unknown): boolean {
  if (err instanceof SvcError) return err instanceof SvcConnectionError || err.status >= 500;
  return true; // a body that broke mid-stream (`TypeError: terminated`, socket reset, ...)
}

/**
 * A background (or reattached) command. It follows the exec's output from byte offsets; when the
 * connection breaks, or after {@link disconnect}, following resumes from the offsets reached, so no
 * output is lost or repeated. The offsets can also be handed to `commands.connect` elsewhere.
 */
export class CommandHandle {
  /** Output seen by this handle (from its start offsets). */
  stdout = "";
  stderr = "";
  /** Next byte offset of stdout to read (all bytes before it were delivered or reported lost). */
  stdoutOffset: number;
  /** Next byte offset of stderr to read. */
  stderrOffset: number;
  /** Bytes the server had already dropped when asked for them (its buffer is bounded). */
  lostBytes = { stdout: 0, stderr: 0 };
  /** Set once the exit line arrived. */
  result: CommandResult | undefined;

  private readonly onStdout: OutputCallback | undefined;
  private readonly onStderr: OutputCallback | undefined;
  private following: Promise<CommandResult> | undefined;
  private controller: AbortController | undefined;

  constructor(
    readonly commands: Commands,
    readonly execId: string,
    options: ConnectOptions = {},
  ) {
    this.onStdout = options.onStdout;
    this.onStderr = options.onStderr;
    this.stdoutOffset = options.stdoutOffset ?? 0;
    this.stderrOffset = options.stderrOffset ?? 0;
    this.follow();
  }

  /** The sandbox ID. */
  get sandboxId(): string {
    return this.commands.sandboxId;
  }

  /** Waits until the command ends; output keeps flowing to the callbacks meanwhile. */
  wait(): Promise<CommandResult> {
    if (this.result) return Promise.resolve(this.result);
    return this.follow();
  }

  /** Stops following output (the command keeps running); `wait()` or `commands.connect` resume. */
  disconnect(): void {
    this.controller?.abort(new SvcError(`exec ${this.execId}: handle disconnected`, "disconnected", 0));
    this.controller = undefined;
    this.following = undefined;
  }

  /** Kills the command. */
  async kill(): Promise<StatusBody> {
    return this.commands.kill(this.execId);
  }

  /** Writes to the command's stdin; `eof` closes it afterwards. */
  async sendStdin(data: string, options: { eof?: boolean } = {}): Promise<StatusBody> {
    return this.commands.sendStdin(this.execId, data, options);
  }

  /** Closes the command's stdin. */
  async closeStdin(): Promise<StatusBody> {
    return this.commands.sendStdin(this.execId, "", { eof: true });
  }

  /** Sends a signal. */
  async signal(signal: SignalName): Promise<StatusBody> {
    return this.commands.signal(this.execId, signal);
  }

  /** The exec's record (status, exit code, byte counts). */
  async info(): Promise<ExecRecord> {
    return this.commands.get(this.execId);
  }

  private follow(): Promise<CommandResult> {
    if (!this.following) {
      const controller = new AbortController();
      this.controller = controller;
      const following = this.followLoop(controller.signal);
      following.catch(() => undefined); // nobody may be waiting; failures surface through wait()
      this.following = following;
    }
    return this.following;
  }

  private async followLoop(signal: AbortSignal): Promise<CommandResult> {
    let failures = 0;
    for (;;) {
      let response: Response | undefined;
      try {
        response = await this.commands.client.fetch("execOutput", {
          params: { id: this.sandboxId, exec_id: this.execId },
          query: { stdout_offset: this.stdoutOffset, stderr_offset: this.stderrOffset, follow: true },
          signal,
        });
        failures = 0;
        for await (const line of readNdjson<ExecOutputLine>(response)) {
          if (signal.aborted) throw signal.reason;
          this.take(line);
          if (line.stream === "exit") return await this.finish(line.exit_code, line.duration);
        }
      } catch (err) {
        if (signal.aborted) throw signal.reason ?? err;
        // A stream that broke after connecting (a proxy or the client's idle body timeout on a
        // quiet command) resumes at once; failing to connect at all is retried a few times.
        if (!retryable(err) || (response === undefined && ++failures > 5)) throw err;
      }
      if (signal.aborted) throw signal.reason;
      // The stream ended without the exit line: resume from the offsets reached.
      await new Promise((resolve) => setTimeout(resolve, Math.min(100 * 2 ** failures, 2000)));
    }
  }

  private take(line: ExecOutputLine): void {
    if (line.stream === "exit") return;
    if ("lost" in line) {
      if (line.stream === "stdout") {
        this.stdoutOffset += line.lost;
        this.lostBytes.stdout += line.lost;
      } else {
        this.stderrOffset += line.lost;
        this.lostBytes.stderr += line.lost;
      }
      return;
    }
    // `offset` is the chunk's first byte in the raw stream; the server starts exactly at the
    // offset asked for and never repeats bytes. `data` is the UTF-8 rendering: for valid UTF-8
    // its length is the raw length; bytes that were not UTF-8 (shown as U+FFFD) make it an
    // estimate, which the next chunk's offset and the final byte counts correct.
    const end = line.offset + byteLength(line.data);
    if (line.stream === "stdout") {
      this.stdoutOffset = end;
      this.stdout += line.data;
      this.onStdout?.(line.data);
    } else {
      this.stderrOffset = end;
      this.stderr += line.data;
      this.onStderr?.(line.data);
    }
  }

  private async finish(exitCode: number, duration: string): Promise<CommandResult> {
    let timedOut = false;
    try {
      const record = await this.commands.get(this.execId);
      timedOut = record.status === "timed_out";
      // The record's byte counts are exact once the exec has ended.
      this.stdoutOffset = record.stdout_bytes;
      this.stderrOffset = record.stderr_bytes;
    } catch {
      // the record may be gone (only the last 100 ended execs are kept)
    }
    this.result = {
      execId: this.execId,
      exitCode,
      stdout: this.stdout,
      stderr: this.stderr,
      duration,
      timedOut,
    };
    return this.result;
  }
}
