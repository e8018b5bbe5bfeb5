// The console's client of svc's API: the credential entered once (kept for this browser
// session only, in sessionStorage), JSON calls, and the event stream read with fetch so the
// credential can travel as a header (EventSource cannot send one), and NDJSON streams.

export type Credential = { kind: "api-key" | "bearer"; value: string };

const STORAGE_KEY = "svc-console-credential";
const BASE = "/api/v1";

export function savedCredential(): Credential | null {
  const text = sessionStorage.getItem(STORAGE_KEY);
  if (!text) return null;
  try {
    return JSON.parse(text) as Credential;
  } catch {
    return null;
  }
}

export function saveCredential(credential: Credential | null): void {
  if (credential) sessionStorage.setItem(STORAGE_KEY, JSON.stringify(credential));
  else sessionStorage.removeItem(STORAGE_KEY);
}

function headers(extra: Record<string, string> = {}): Record<string, string> {
  const credential = savedCredential();
  const all: Record<string, string> = { ...extra };
  if (credential?.kind === "api-key") all["X-API-Key"] = credential.value;
  if (credential?.kind === "bearer") all["Authorization"] = `Bearer ${credential.value}`;
  return all;
}

/** A refusal from the server: its status, `code` and `message`. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

/** Called when a request is refused for its credential (401), so the app can ask again. */
let onUnauthorized: () => void = () => {};
export function whenUnauthorized(handler: () => void): void {
  onUnauthorized = handler;
}

async function refusal(response: Response): Promise<ApiError> {
  let code = "error";
  let message = response.statusText;
  try {
    const body = (await response.json()) as { code?: string; message?: string };
    code = body.code ?? code;
    message = body.message ?? message;
  } catch {
    // Not JSON: the status says enough.
  }
  if (response.status === 401) onUnauthorized();
  return new ApiError(response.status, code, message);
}

/** A JSON call; `init.body` objects are sent as JSON. */
export async function call<T>(
  method: string,
  path: string,
  body?: unknown,
): Promise<{ data: T; next: string | null }> {
  const response = await fetch(`${BASE}${path}`, {
    method,
    headers: headers(body === undefined ? {} : { "Content-Type": "application/json" }),
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (!response.ok) throw await refusal(response);
  const text = await response.text();
  return {
    data: (text ? JSON.parse(text) : null) as T,
    next: response.headers.get("X-Next-Cursor"),
  };
}

/** Whether the credential (or none) is accepted. */
export async function checkAccess(): Promise<boolean> {
  const response = await fetch(`${BASE}/sandboxes?limit=1`, { headers: headers() });
  return response.ok;
}

export type Event = {
  id: string;
  type: string;
  sandbox_id: string;
  timestamp: string;
  data?: Record<string, unknown>;
};

/** Where a followed stream is: connecting, live, or waiting to reconnect after `reason`. */
export type StreamStatus = "connecting" | "live" | `reconnecting: ${string}` | `stopped: ${string}`;

const RECONNECT_MS = 2000;

/**
 * Follows `GET /events` with `query` until `signal` aborts, calling `onEvent` for each event.
 * A dropped stream (or one the server ended after an `overflow`) is reopened after a pause with
 * `Last-Event-ID`, so no event is missed; a refusal other than rate limiting stops it. With
 * `replay`, the server's history comes first: an ID it does not hold replays all of it
 * (decisions §12).
 */
export async function followEvents(
  query: string,
  onEvent: (event: Event) => void,
  onStatus: (status: StreamStatus) => void,
  signal: AbortSignal,
  replay = false,
): Promise<void> {
  let last = replay ? "history" : "";
  while (!signal.aborted) {
    let reason = "the stream ended";
    try {
      const response = await fetch(`${BASE}/events${query}`, {
        headers: headers(last ? { "Last-Event-ID": last } : {}),
        signal,
      });
      if (!response.ok || !response.body) {
        const error = await refusal(response);
        if (response.status !== 429 && response.status < 500) {
          onStatus(`stopped: ${error.message}`);
          return;
        }
        reason = error.message;
      } else {
        onStatus("live");
        for await (const block of messages(response.body)) {
          if (block.event && block.event !== "message") continue;
          if (!block.data) continue;
          const event = JSON.parse(block.data) as Event;
          last = block.id || event.id || last;
          onEvent(event);
        }
      }
    } catch (error) {
      if (signal.aborted) return;
      reason = (error as Error).message;
    }
    onStatus(`reconnecting: ${reason}`);
    await new Promise((resolve) => setTimeout(resolve, RECONNECT_MS));
  }
}

type Body = NonNullable<Response["body"]>;

/** The text of `body`, a line at a time (without its end of line). */
async function* lines(body: Body): AsyncGenerator<string> {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let pending = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) {
      if (pending) yield pending;
      return;
    }
    pending += value;
    let end: number;
    while ((end = pending.indexOf("\n")) >= 0) {
      yield pending.slice(0, end).replace(/\r$/, "");
      pending = pending.slice(end + 1);
    }
  }
}

/** Server-sent events: each message's `id`, `event` and `data` fields. */
async function* messages(
  body: Body,
): AsyncGenerator<{ id: string; event: string; data: string }> {
  let block = { id: "", event: "", data: "" };
  for await (const line of lines(body)) {
    if (line === "") {
      yield block;
      block = { id: "", event: "", data: "" };
      continue;
    }
    const colon = line.indexOf(":");
    if (colon === 0) continue; // a comment (keep-alive)
    const field = colon < 0 ? line : line.slice(0, colon);
    const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
    if (field === "id") block.id = value;
    else if (field === "event") block.event = value;
    else if (field === "data") block.data = block.data ? `${block.data}\n${value}` : value;
  }
}

/** Follows an NDJSON answer (build logs, exec output) until it ends or `signal` aborts. */
export async function followLines<T>(
  path: string,
  onLine: (line: T) => void,
  signal: AbortSignal,
): Promise<void> {
  const response = await fetch(`${BASE}${path}`, { headers: headers(), signal });
  if (!response.ok || !response.body) throw await refusal(response);
  for await (const line of lines(response.body)) {
    if (line.trim()) onLine(JSON.parse(line) as T);
  }
}

/** The text metrics (`/metrics/scrape`). */
export async function scrape(): Promise<string> {
  const response = await fetch(`${BASE}/metrics/scrape`, { headers: headers() });
  if (!response.ok) throw await refusal(response);
  return response.text();
}

/** Sends `body` as the raw request body (a file upload). */
export async function upload(path: string, body: Blob): Promise<void> {
  const response = await fetch(`${BASE}${path}`, {
    method: "PUT",
    headers: headers({ "Content-Type": "application/octet-stream" }),
    body,
  });
  if (!response.ok) throw await refusal(response);
}

/** The raw bytes at `path` (a file download). */
export async function download(path: string): Promise<Blob> {
  const response = await fetch(`${BASE}${path}`, { headers: headers() });
  if (!response.ok) throw await refusal(response);
  return response.blob();
}
