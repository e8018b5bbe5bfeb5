// GET /events as an async iterator of events (server-sent events, decisions §12).
import { SvcClient, type ConnectionOptions } from "./client.js";
import { SvcConnectionError, SvcError } from "./errors.js";
import type { EventType, SvcEvent } from "./types.js";

export interface EventsOptions extends ConnectionOptions {
  /** Only these types (`sandbox.created`, ...). */
  types?: (EventType | (string & {}))[];
  /** Only events of this sandbox. */
  sandboxId?: string;
  /** Replay events newer than this ID from the server's history first. */
  lastEventId?: string;
  /** Ends the iteration. */
  signal?: AbortSignal;
  /** When the server drops a subscriber that fell behind (`event: overflow`), resume from the
   *  last event ID (default true) instead of throwing. */
  resumeOnOverflow?: boolean;
}

/** A live subscription. The server registered it before answering, so every event published
 *  after `events()` resolved is delivered. Iterate with `for await`; `close()` ends it. */
export class EventStream implements AsyncIterable<SvcEvent> {
  /** ID of the last event delivered (for resuming with `lastEventId`). */
  lastEventId: string | undefined;
  private controller = new AbortController();
  private response: Response | undefined;

  private constructor(
    private readonly client: SvcClient,
    private readonly options: EventsOptions,
  ) {
    this.lastEventId = options.lastEventId;
    options.signal?.addEventListener("abort", () => this.close(), { once: true });
  }

  /** Subscribes and resolves once the server answered 200. */
  static async open(options: EventsOptions = {}): Promise<EventStream> {
    const stream = new EventStream(SvcClient.from(options), options);
    stream.response = await stream.connect();
    return stream;
  }

  private async connect(): Promise<Response> {
    const headers: Record<string, string> = { Accept: "text/event-stream" };
    if (this.lastEventId) headers["Last-Event-ID"] = this.lastEventId;
    const query: Record<string, string> = {};
    if (this.options.types?.length) query.types = this.options.types.join(",");
    if (this.options.sandboxId) query.sandbox_id = this.options.sandboxId;
    return this.client.fetch("events", { query, headers, signal: this.controller.signal });
  }

  /** Ends the subscription. */
  close(): void {
    this.controller.abort(new SvcError("event stream closed", "closed", 0));
  }

  async [Symbol.asyncDispose](): Promise<void> {
    this.close();
  }

  async *[Symbol.asyncIterator](): AsyncIterator<SvcEvent> {
    for (;;) {
      const response = this.response ?? (await this.connect());
      this.response = undefined;
      let overflow = false;
      try {
        for await (const message of parseSse(response)) {
          if (message.event === "overflow") {
            overflow = true;
            break;
          }
          if (!message.data) continue;
          if (message.id) this.lastEventId = message.id;
          yield JSON.parse(message.data) as SvcEvent;
        }
      } catch (err) {
        if (this.controller.signal.aborted) return;
        throw new SvcConnectionError(`event stream broke: ${(err as Error).message}`, "connection_error", 0, undefined, { cause: err });
      }
      if (this.controller.signal.aborted) return;
      if (!overflow) return; // the server ended the stream (shutting down)
      if (this.options.resumeOnOverflow === false) {
        throw new SvcError("the server dropped this subscriber for falling behind (overflow)", "overflow", 0);
      }
    }
  }
}

interface SseMessage {
  id?: string;
  event?: string;
  data: string;
}

/** Parses a text/event-stream body into messages (comments and keep-alives skipped). */
async function* parseSse(response: Response): AsyncGenerator<SseMessage> {
  if (!response.body) return;
  const decoder = new TextDecoder();
  let buffer = "";
  let current: SseMessage = { data: "" };
  let hasData = false;
  for await (const chunk of response.body as unknown as AsyncIterable<Uint8Array>) {
    buffer += decoder.decode(chunk, { stream: true });
    let newline: number;
    while ((newline = buffer.search(/\r\n|\n|\r/)) >= 0) {
      const line = buffer.slice(0, newline);
      buffer = buffer.slice(newline + (buffer.startsWith("\r\n", newline) ? 2 : 1));
      if (line === "") {
        if (hasData || current.event) yield current;
        current = { data: "" };
        hasData = false;
        continue;
      }
      if (line.startsWith(":")) continue;
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      let value = colon < 0 ? "" : line.slice(colon + 1);
      if (value.startsWith(" ")) value = value.slice(1);
      if (field === "data") {
        current.data = hasData ? `${current.data}\n${value}` : value;
        hasData = true;
      } else if (field === "id") {
        current.id = value;
      } else if (field === "event") {
        current.event = value;
      }
    }
  }
}

/** Subscribes to the server's events; resolves once subscribed. */
export function events(options: EventsOptions = {}): Promise<EventStream> {
  return EventStream.open(options);
}
