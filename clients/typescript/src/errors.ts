// Typed errors mirroring the server's error codes (decisions §4 and the interface's error table).
// Every error response is `{code, message}`; the SDK throws the subclass for `code`, or `SvcError`
// itself for a code it does not know.
import type { TemplateBuild } from "./types.js";

/** Base class of every error the SDK throws for a server answer or a transport failure. */
export class SvcError extends Error {
  /** The server's machine-readable code (`not_found`, ...); `connection_error` for transport failures. */
  readonly code: string;
  /** HTTP status; 0 when no response was received. */
  readonly status: number;
  /** The `X-Request-ID` of the failed request, when the server sent one. */
  readonly requestId: string | undefined;

  constructor(message: string, code: string, status: number, requestId?: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
    this.code = code;
    this.status = status;
    this.requestId = requestId;
  }
}

/** 400 `bad_request`: a missing or malformed field, a relative path, an unknown provider, ... */
export class BadRequestError extends SvcError {}
/** 401 `unauthorized`: missing or invalid credentials. */
export class UnauthorizedError extends SvcError {}
/** 403 `forbidden`: authenticated, but the role does not allow the route. */
export class ForbiddenError extends SvcError {}
/** 403 `policy_denied`: a tenant policy denies the spawn (a kind of ForbiddenError). */
export class PolicyDeniedError extends ForbiddenError {}
/** 404 `not_found`: sandbox, exec, file, template, quota or provider does not exist. */
export class NotFoundError extends SvcError {}
/** 405 `method_not_allowed`. */
export class MethodNotAllowedError extends SvcError {}
/** 409 `conflict`: name exists, sandbox destroyed or paused, exec already ended. */
export class ConflictError extends SvcError {}
/** 409 `lease_conflict`: another worker holds the sandbox lease (a kind of ConflictError). */
export class LeaseConflictError extends ConflictError {}
/** 413 `payload_too_large`. */
export class PayloadTooLargeError extends SvcError {}
/** 416 `range_not_satisfiable`: a read range outside the file. */
export class RangeNotSatisfiableError extends SvcError {}
/** 429 `resource_limit`: quota, capacity, TTL or rate limit; spawn queue timeout. */
export class ResourceLimitError extends SvcError {
  /** Seconds from `Retry-After`, when the server sent it (rate limiting). */
  retryAfter: number | undefined;
}
/** 500 `provider_error`: the provider failed. */
export class ProviderError extends SvcError {}
/** 500 `internal`. */
export class InternalError extends SvcError {}
/** 502 `bad_gateway`: a preview port with nothing listening. */
export class BadGatewayError extends SvcError {}
/** 503 `unavailable`: pool full, unhealthy provider, feature not configured. */
export class UnavailableError extends SvcError {}
/** Client side, code `connection_error`: no answer from the server, or the connection broke. */
export class SvcConnectionError extends SvcError {}
/** Client side, code `timeout`: a wait with a deadline ran out (e.g. `ExecSession.waitForOutput`). */
export class SvcTimeoutError extends SvcError {}
/** Client side, code `protocol_error`: the server sent something the SDK does not understand,
 *  or refused a WebSocket message (`{"type":"error"}`). */
export class ProtocolError extends SvcError {}
/** Client side, code `build_failed` or `build_cancelled`: a template build did not succeed.
 *  `build` is its record; the message carries its `error` (the failed step and its output). */
export class BuildError extends SvcError {
  readonly build: TemplateBuild;

  constructor(build: TemplateBuild) {
    super(
      `build ${build.build_id} of template ${JSON.stringify(build.template)} ${build.status}: ${build.error ?? "no reason given"}`,
      `build_${build.status}`,
      0,
    );
    this.build = build;
  }
}

/** The subclass for each wire code. */
export const errorClasses: Record<string, typeof SvcError> = {
  bad_request: BadRequestError,
  unauthorized: UnauthorizedError,
  forbidden: ForbiddenError,
  policy_denied: PolicyDeniedError,
  not_found: NotFoundError,
  method_not_allowed: MethodNotAllowedError,
  conflict: ConflictError,
  lease_conflict: LeaseConflictError,
  payload_too_large: PayloadTooLargeError,
  range_not_satisfiable: RangeNotSatisfiableError,
  resource_limit: ResourceLimitError,
  provider_error: ProviderError,
  internal: InternalError,
  bad_gateway: BadGatewayError,
  unavailable: UnavailableError,
};

/** Codes for statuses whose body is not the usual JSON (a proxy in between, ...). */
const codeForStatus: Record<number, string> = {
  400: "bad_request",
  401: "unauthorized",
  403: "forbidden",
  404: "not_found",
  405: "method_not_allowed",
  409: "conflict",
  413: "payload_too_large",
  416: "range_not_satisfiable",
  429: "resource_limit",
  500: "internal",
  502: "bad_gateway",
  503: "unavailable",
};

/** The HTTP status that goes with a wire code (0 when unknown). */
export function statusOf(code: string): number {
  for (const [status, known] of Object.entries(codeForStatus)) if (known === code) return Number(status);
  return ({ policy_denied: 403, lease_conflict: 409, provider_error: 500 } as Record<string, number>)[code] ?? 0;
}

/** The typed error for a code, status and message. */
export function errorFor(code: string, status: number, message: string, requestId?: string): SvcError {
  const Class = errorClasses[code] ?? SvcError;
  return new Class(message, code, status, requestId);
}

/** Reads an error response's `{code, message}` body and builds the typed error. */
export async function errorFromResponse(response: Response): Promise<SvcError> {
  const requestId = response.headers.get("x-request-id") ?? undefined;
  let text = "";
  try {
    text = await response.text();
  } catch {
    // the body is lost; the status still says what kind of error it was
  }
  let code = codeForStatus[response.status] ?? "unknown";
  let message = text || `${response.status} ${response.statusText}`;
  try {
    const body = JSON.parse(text) as { code?: unknown; message?: unknown };
    if (typeof body.code === "string") code = body.code;
    if (typeof body.message === "string") message = body.message;
  } catch {
    // not JSON: keep the status-derived code and the raw text
  }
  const error = errorFor(code, response.status, message, requestId);
  if (error instanceof ResourceLimitError) {
    const retry = Number(response.headers.get("retry-after"));
    if (Number.isFinite(retry) && retry > 0) error.retryAfter = retry;
  }
  return error;
}
