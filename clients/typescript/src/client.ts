// The HTTP core: configuration (SVC_URL, SVC_API_KEY, SVC_TOKEN), route-table requests typed by
// the OpenAPI document, typed errors, NDJSON reading.
import { ProtocolError, SvcConnectionError, errorFromResponse } from "./errors.js";
import { routes, type Operation, type RouteName } from "./routes.js";
import type { Egress } from "./types.js";

export const DEFAULT_URL = "http://127.0.0.1:7423";

/** Where the server is and who is calling. Every field falls back to the environment. */
export interface ConnectionOptions {
  /** Server base URL; default `SVC_URL`, else `http://127.0.0.1:7423`. A trailing `/api/v1` is fine. */
  url?: string;
  /** Sent as `X-API-Key`; default `SVC_API_KEY`. */
  apiKey?: string;
  /** OIDC bearer token sent as `Authorization: Bearer`; default `SVC_TOKEN`. */
  token?: string;
  /** Sent as `X-User-ID` (owner for quotas, pool mode). */
  userId?: string;
  /** Extra headers on every request. */
  headers?: Record<string, string>;
  /** An existing client to reuse (its settings win over the fields above). */
  client?: SvcClient;
}

type JsonOf<R> = R extends { content: { "application/json": infer T } } ? T : never;
type Responses<N extends RouteName> = Operation<N>["responses"];
/** The JSON body of a route's success answer (200, else 201), from the OpenAPI document. */
export type ResponseOf<N extends RouteName> = 200 extends keyof Responses<N>
  ? JsonOf<Responses<N>[200]>
  : 201 extends keyof Responses<N>
    ? JsonOf<Responses<N>[201]>
    : never;
/** The JSON request body of a route, from the OpenAPI document. */
export type BodyOf<N extends RouteName> =
  NonNullable<Operation<N>["requestBody"]> extends { content: { "application/json": infer B } } ? B : never;
/** The query parameters of a route, from the OpenAPI document. */
export type QueryOf<N extends RouteName> = NonNullable<Operation<N>["parameters"]["query"]>;
/** The path parameters of a route, from the OpenAPI document. */
export type PathOf<N extends RouteName> = NonNullable<Operation<N>["parameters"]["path"]>;

/** A raw request body: bytes, text, a web stream, a Node stream or any async iterable of bytes. */
export type RawBody =
  | string
  | Uint8Array
  | ArrayBuffer
  | Blob
  | ReadableStream<Uint8Array>
  | AsyncIterable<Uint8Array | string>;

export interface RequestOptions<N extends RouteName> {
  params?: PathOf<N>;
  query?: QueryOf<N>;
  body?: BodyOf<N>;
  raw?: RawBody;
  contentType?: string;
  headers?: Record<string, string>;
  signal?: AbortSignal;
}

function envValue(name: string): string | undefined {
  const value = process.env[name];
  return value === undefined || value === "" ? undefined : value;
}

/** Normalises a base URL: no trailing slash, no trailing `/api/v1`. */
function baseUrl(url: string): string {
  let out = url.trim().replace(/\/+$/, "");
  if (out.endsWith("/api/v1")) out = out.slice(0, -"/api/v1".length);
  return out;
}

/** The server connection shared by sandboxes, templates, quotas and events. */
export class SvcClient {
  readonly url: string;
  readonly apiKey: string | undefined;
  readonly token: string | undefined;
  readonly userId: string | undefined;
  readonly headers: Record<string, string>;

  constructor(options: Omit<ConnectionOptions, "client"> = {}) {
    this.url = baseUrl(options.url ?? envValue("SVC_URL") ?? DEFAULT_URL);
    this.apiKey = options.apiKey ?? envValue("SVC_API_KEY");
    this.token = options.token ?? envValue("SVC_TOKEN");
    this.userId = options.userId;
    this.headers = { ...(options.headers ?? {}) };
  }

  /** `options.client`, or a new client from the options and the environment. */
  static from(options: ConnectionOptions = {}): SvcClient {
    return options.client ?? new SvcClient(options);
  }

  /** Headers carrying the credentials (also used for the WebSocket upgrade). */
  authHeaders(): Record<string, string> {
    const headers: Record<string, string> = { ...this.headers };
    if (this.apiKey) headers["X-API-Key"] = this.apiKey;
    if (this.token) headers["Authorization"] = `Bearer ${this.token}`;
    if (this.userId) headers["X-User-ID"] = this.userId;
    return headers;
  }

  /** The absolute URL of a route with its path parameters and query filled in. */
  routeUrl<N extends RouteName>(name: N, params?: PathOf<N>, query?: QueryOf<N>): URL {
    const route = routes[name];
    const values = (params ?? {}) as Record<string, string>;
    const path = route.path.replace(/\{([^}]+)\}/g, (_, key: string) => {
      const value = values[key];
      if (value === undefined) throw new TypeError(`route ${name}: missing path parameter ${key}`);
      return encodeURIComponent(value);
    });
    const url = new URL(this.url + path);
    for (const [key, value] of Object.entries((query ?? {}) as Record<string, unknown>)) {
      if (value === undefined || value === null) continue;
      url.searchParams.set(key, String(value));
    }
    return url;
  }

  /** Sends a request on a route; answers the response when its status is 2xx, else throws the typed error. */
  async fetch<N extends RouteName>(name: N, options: RequestOptions<N> = {}): Promise<Response> {
    const route = routes[name];
    const url = this.routeUrl(name, options.params, options.query);
    const headers: Record<string, string> = { ...this.authHeaders(), ...(options.headers ?? {}) };
    const init: RequestInit & { duplex?: "half" } = { method: route.method, headers };
    if (options.signal) init.signal = options.signal;
    if (options.body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(options.body);
    } else if (options.raw !== undefined) {
      headers["Content-Type"] = options.contentType ?? "application/octet-stream";
      init.body = toBodyInit(options.raw);
      if (isStreaming(options.raw)) init.duplex = "half";
    }
    let response: Response;
    try {
      response = await fetch(url, init);
    } catch (err) {
      if (options.signal?.aborted) throw options.signal.reason ?? err;
      const cause = (err as { cause?: { message?: string } }).cause;
      const detail = cause?.message ?? (err as Error).message;
      throw new SvcConnectionError(
        `${route.method} ${url.pathname}: no answer from ${this.url}: ${detail}`,
        "connection_error",
        0,
        undefined,
        { cause: err },
      );
    }
    if (!response.ok) throw await errorFromResponse(response);
    return response;
  }

  /** Sends a request and parses the JSON answer (typed by the route's OpenAPI response). */
  /** Every item of a list route: each page, following `X-Next-Cursor` until an answer has none. */
  async listAll<N extends RouteName, T extends unknown[] = Extract<ResponseOf<N>, unknown[]>>(
    name: N,
    options: RequestOptions<N> = {},
  ): Promise<T> {
    const query: Record<string, unknown> = { ...(options.query ?? {}) };
    const items: unknown[] = [];
    for (;;) {
      const response = await this.fetch(name, { ...options, query: query as QueryOf<N> });
      items.push(...((await response.json()) as unknown[]));
      const cursor = response.headers.get("x-next-cursor");
      if (!cursor) return items as T;
      query.cursor = cursor;
    }
  }

  async json<N extends RouteName, T = ResponseOf<N>>(name: N, options: RequestOptions<N> = {}): Promise<T> {
    const response = await this.fetch(name, options);
    const text = await response.text();
    try {
      return JSON.parse(text) as T;
    } catch {
      throw new ProtocolError(`${routes[name].method} ${routes[name].path}: answer is not JSON: ${text.slice(0, 200)}`, "protocol_error", response.status);
    }
  }
}

function isStreaming(body: RawBody): boolean {
  return !(typeof body === "string" || body instanceof Uint8Array || body instanceof ArrayBuffer || body instanceof Blob);
}

type FetchBody = NonNullable<RequestInit["body"]>;

function toBodyInit(body: RawBody): FetchBody {
  if (typeof body === "string" || body instanceof Uint8Array || body instanceof ArrayBuffer || body instanceof Blob) {
    return body as FetchBody;
  }
  if (body instanceof ReadableStream) return body as unknown as FetchBody;
  // Node streams and other async iterables: strings become UTF-8 bytes.
  const source = body;
  async function* bytes(): AsyncGenerator<Uint8Array> {
    for await (const chunk of source) {
      yield typeof chunk === "string" ? new TextEncoder().encode(chunk) : chunk;
    }
  }
  return bytes() as unknown as FetchBody;
}

/** Reads a response body of newline-delimited JSON, one parsed object per line. */
export async function* readNdjson<T>(response: Response): AsyncGenerator<T> {
  if (!response.body) return;
  const decoder = new TextDecoder();
  let buffer = "";
  for await (const chunk of response.body as unknown as AsyncIterable<Uint8Array>) {
    buffer += decoder.decode(chunk, { stream: true });
    let newline: number;
    while ((newline = buffer.indexOf("\n")) >= 0) {
      const line = buffer.slice(0, newline).trim();
      buffer = buffer.slice(newline + 1);
      if (line) yield JSON.parse(line) as T;
    }
  }
  buffer += decoder.decode();
  if (buffer.trim()) yield JSON.parse(buffer) as T;
}

/** A duration for the wire: strings pass as they are (`30s`, `1h30m`), numbers are seconds. */
export function toDuration(value: string | number): string {
  if (typeof value === "string") return value;
  if (!Number.isFinite(value) || value < 0) throw new RangeError(`invalid duration: ${value} seconds`);
  return Number.isInteger(value) ? `${value}s` : `${Math.round(value * 1000)}ms`;
}

/**
 * `egress` as the SDK takes it: the server's object, a bare mode (`"none"`), or a list of allowed
 * destinations (`["pypi.org:443", "*.github.com", "10.0.0.0/8"]`, an allowlist).
 */
export type EgressInput = Egress | NonNullable<Egress["mode"]> | string[];

export function toEgress(value: EgressInput): Egress {
  if (typeof value === "string") return { mode: value };
  if (Array.isArray(value)) return { mode: "allowlist", allow: [...value] };
  return value;
}
