export { SvcClient, DEFAULT_URL, toDuration, toEgress, type ConnectionOptions, type EgressInput, type RawBody } from "./client.js";
export * from "./errors.js";
export { Sandbox, type SandboxCreateOptions, type SandboxListOptions } from "./sandbox.js";
export {
  Commands,
  CommandHandle,
  type CommandResult,
  type ConnectOptions,
  type OutputCallback,
  type RunOptions,
  type SignalName,
} from "./commands.js";
export { Files, type ReadRange, type WriteData } from "./files.js";
export { Pty, ExecSession, type SessionOptions } from "./pty.js";
export { Templates, type BuildInput, type BuildOptions, type BuildLogCallback, type TemplateInput } from "./templates.js";
export { Quotas, type QuotaInput } from "./quotas.js";
export { EventStream, events, type EventsOptions } from "./events.js";
export { Svc } from "./svc.js";
export { routes, type RouteName } from "./routes.js";
export type * from "./types.js";
export type { components, paths } from "./openapi.js";
