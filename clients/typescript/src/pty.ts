// Interactive execs over the WebSocket `/exec/ws` (decisions §8): PTY sessions (`tty: true`,
// stderr merged into stdout, resizable) and interactive commands with separate stdout/stderr.
import WebSocket from "ws";
import type { IncomingMessage } from "node:http";
import { toDuration, type SvcClient } from "./client.js";
import { ProtocolError, SvcConnectionError, SvcTimeoutError, errorFor, statusOf } from "./errors.js";
import type { SignalName } from "./commands.js";

export interface SessionOptions {
  /** Command line (through `/bin/sh -c` unless `args` is given). PTY default: `/bin/sh`. */
  command?: string;
  args?: string[];
  env?: Record<string, string>;
  workdir?: string;
  timeout?: string | number;
  /** Terminal size (PTY only); default 80x24. */
  cols?: number;
  rows?: number;
  /** Called with each piece of stdout (for a PTY: all terminal output). */
  onData?: (data: string) => void;
  /** Called with each piece of stderr (not for a PTY, which merges it into stdout). */
  onStderr?: (data: string) => void;
}

type ServerMessage =
  | { type: "stdout" | "stderr"; data: string }
  | { type: "exit"; exit_code: number }
  | { type: "error"; message: string; code?: string };

/** One interactive exec over a WebSocket. */
export class ExecSession {
  /** Exec ID from the `X-Exec-ID` header of the upgrade (usable with `commands.get`). */
  execId: string | undefined;
  /** All stdout (terminal output) received so far. */
  output = "";
  /** All stderr received so far (empty for a PTY). */
  stderr = "";
  /** Set when the exit message arrived. */
  exitCode: number | undefined;

  private readonly socket: WebSocket;
  private readonly exited: Promise<number>;
  private readonly waiters = new Set<() => void>();

  private constructor(socket: WebSocket, options: SessionOptions) {
    this.socket = socket;
    this.exited = new Promise<number>((resolve, reject) => {
      socket.on("message", (raw: WebSocket.RawData) => {
        let message: ServerMessage;
        try {
          message = JSON.parse(raw.toString()) as ServerMessage;
        } catch {
          return;
        }
        if (message.type === "stdout") {
          this.output += message.data;
          options.onData?.(message.data);
        } else if (message.type === "stderr") {
          this.stderr += message.data;
          options.onStderr?.(message.data);
        } else if (message.type === "exit") {
          this.exitCode = message.exit_code;
          resolve(message.exit_code);
        } else if (message.type === "error") {
          // The server names the error's code; a message without one is a protocol error.
          reject(message.code ? errorFor(message.code, statusOf(message.code), message.message) : new ProtocolError(message.message, "protocol_error", 0));
        }
        for (const wake of this.waiters) wake();
      });
      socket.on("close", (code: number, reason: Buffer) => {
        if (this.exitCode === undefined) {
          reject(new SvcConnectionError(`exec session closed before the command exited (${code} ${reason.toString()})`, "connection_error", 0));
        }
        for (const wake of this.waiters) wake();
      });
      socket.on("error", (err: Error) => reject(new SvcConnectionError(`exec session: ${err.message}`, "connection_error", 0, undefined, { cause: err })));
    });
    this.exited.catch(() => undefined);
  }

  /** Opens a session: upgrades, sends `start`, and answers once the socket is open. */
  static async open(client: SvcClient, sandboxId: string, tty: boolean, options: SessionOptions = {}): Promise<ExecSession> {
    const url = client.routeUrl("execWs", { id: sandboxId });
    url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
    const socket = new WebSocket(url, { headers: client.authHeaders() });
    let execId: string | undefined;
    socket.on("upgrade", (response: IncomingMessage) => {
      const header = response.headers["x-exec-id"];
      execId = Array.isArray(header) ? header[0] : header;
    });
    await new Promise<void>((resolve, reject) => {
      socket.once("open", () => resolve());
      socket.once("unexpected-response", (_request, response: IncomingMessage) => {
        let text = "";
        response.on("data", (chunk: Buffer) => (text += chunk.toString()));
        response.on("end", () => {
          let code = "unknown";
          let message = text || `HTTP ${response.statusCode}`;
          try {
            const body = JSON.parse(text) as { code?: string; message?: string };
            code = body.code ?? code;
            message = body.message ?? message;
          } catch {
            // keep the raw text
          }
          const requestId = response.headers["x-request-id"];
          reject(errorFor(code, response.statusCode ?? 0, message, typeof requestId === "string" ? requestId : undefined));
          socket.terminate();
        });
      });
      socket.once("error", (err: Error) =>
        reject(new SvcConnectionError(`exec session: no answer from ${client.url}: ${err.message}`, "connection_error", 0, undefined, { cause: err })),
      );
    });
    const session = new ExecSession(socket, options);
    session.execId = execId;
    const start: Record<string, unknown> = { type: "start", command: options.command ?? (tty ? "/bin/sh" : ""), tty };
    if (options.args) start.args = options.args;
    if (options.env) start.env = options.env;
    if (options.workdir) start.workdir = options.workdir;
    if (options.timeout !== undefined) start.timeout = toDuration(options.timeout);
    if (tty) {
      start.cols = options.cols ?? 80;
      start.rows = options.rows ?? 24;
    }
    session.send(start);
    return session;
  }

  private send(message: Record<string, unknown>): void {
    if (this.socket.readyState !== WebSocket.OPEN) {
      throw new SvcConnectionError("exec session is closed", "connection_error", 0);
    }
    this.socket.send(JSON.stringify(message));
  }

  /** Sends input (keystrokes for a PTY). Bytes are sent as their UTF-8 text. */
  sendInput(data: string | Uint8Array): void {
    this.send({ type: "stdin", data: typeof data === "string" ? data : new TextDecoder().decode(data) });
  }

  /** Closes the command's stdin (end of file). */
  closeStdin(): void {
    this.send({ type: "stdin", data: "", eof: true });
  }

  /** Changes the terminal size (PTY only). */
  resize(cols: number, rows: number): void {
    this.send({ type: "resize", cols, rows });
  }

  /** Sends a signal; a command ended by signal N exits with 128+N. */
  signal(signal: SignalName): void {
    this.send({ type: "signal", signal });
  }

  /** Kills the command (SIGKILL). */
  kill(): void {
    this.signal("SIGKILL");
  }

  /** Waits for the command to exit; answers its exit code. */
  wait(): Promise<number> {
    return this.exited;
  }

  /** Waits until the output contains `pattern` (a string or RegExp), with a deadline. */
  async waitForOutput(pattern: string | RegExp, timeoutMs = 10_000): Promise<string> {
    const matches = (): boolean => (typeof pattern === "string" ? this.output.includes(pattern) : pattern.test(this.output));
    if (matches()) return this.output;
    return new Promise<string>((resolve, reject) => {
      const wake = (): void => {
        if (matches()) done(() => resolve(this.output));
        else if (this.socket.readyState === WebSocket.CLOSED) done(() => reject(new SvcTimeoutError(`session ended without output matching ${String(pattern)}; output: ${JSON.stringify(this.output)}`, "timeout", 0)));
      };
      const timer = setTimeout(() => done(() => reject(new SvcTimeoutError(`no output matching ${String(pattern)} within ${timeoutMs}ms; output: ${JSON.stringify(this.output)}`, "timeout", 0))), timeoutMs);
      const done = (then: () => void): void => {
        clearTimeout(timer);
        this.waiters.delete(wake);
        then();
      };
      this.waiters.add(wake);
    });
  }

  /** Closes the socket (the server ends the command). */
  close(): void {
    if (this.socket.readyState === WebSocket.OPEN || this.socket.readyState === WebSocket.CONNECTING) {
      this.socket.close(1000);
    }
  }

  async [Symbol.asyncDispose](): Promise<void> {
    this.close();
  }
}

/** sandbox.pty: terminal sessions. */
export class Pty {
  constructor(
    readonly client: SvcClient,
    readonly sandboxId: string,
  ) {}

  /** Starts a command (default `/bin/sh`) under a pseudo-terminal. */
  async create(options: SessionOptions = {}): Promise<ExecSession> {
    return ExecSession.open(this.client, this.sandboxId, true, options);
  }
}
