// The wire types of the server's OpenAPI document (src/openapi.d.ts). The SDK's requests and
// responses are typed with these, so a field renamed on the server fails `tsc` here.
import type { components } from "./openapi.js";

type Schemas = components["schemas"];

export type SandboxInfo = Schemas["Sandbox"];
export type SandboxState = Schemas["SandboxState"];
export type SpawnRequest = Schemas["SpawnRequest"];
export type Admission = Schemas["Admission"];
export type ExtendRequest = Schemas["ExtendRequest"];
export type PruneBody = Schemas["PruneBody"];
export type SandboxStats = Schemas["SandboxStats"];
export type StatusBody = Schemas["StatusBody"];
export type Egress = Schemas["Egress"];
export type PreviewToken = Schemas["PreviewToken"];
export type PreviewTokenRequest = Schemas["PreviewTokenRequest"];
export type ErrorBody = Schemas["ErrorBody"];

export type ExecRequest = Schemas["ExecRequest"];
export type ExecResult = Schemas["ExecResult"];
export type ExecStarted = Schemas["ExecStarted"];
export type ExecRecord = Schemas["ExecRecord"];
export type ExecStatus = Schemas["ExecStatus"];
export type StdinBody = Schemas["StdinBody"];
export type SignalBody = Schemas["SignalBody"];
export type OnDisconnect = Schemas["OnDisconnect"];

export type FileInfo = Schemas["FileInfo"];
export type WriteFile = Schemas["WriteFile"];
export type MoveFile = Schemas["MoveFile"];
export type ChmodFile = Schemas["ChmodFile"];
export type Written = Schemas["Written"];
export type Extracted = Schemas["Extracted"];

export type Template = Schemas["Template"];
export type TemplateSpec = Schemas["TemplateSpec"];
export type TemplateSpawnRequest = Schemas["TemplateSpawnRequest"];
export type BuildRequest = Schemas["BuildRequest"];
export type BuildAccepted = Schemas["BuildAccepted"];
export type TemplateBuild = Schemas["TemplateBuild"];
export type BuildStatus = Schemas["BuildStatus"];
/** One line of `GET /templates/{name}/builds/{build_id}/logs`, by `type`: `step`, `output`,
 *  `progress`, and last `result`. */
export type BuildLogLine = Schemas["BuildLogLine"];

export type OwnerQuota = Schemas["OwnerQuota"];
export type OwnerUsage = Schemas["OwnerUsage"];
export type QuotaRequest = Schemas["QuotaRequest"];
export type QuotaSummary = Schemas["QuotaSummary"];

export type SvcEvent = Schemas["Event"];
export type EventType = Schemas["EventType"];

export type HealthBody = Schemas["HealthBody"];
export type ReadyBody = Schemas["ReadyBody"];
export type ProviderSummary = Schemas["ProviderSummary"];
export type ProviderDetail = Schemas["ProviderDetail"];

/** One line of a streamed exec (`stream: true`). */
export type ExecStreamLine =
  | { stream: "stdout" | "stderr"; data: string }
  | { stream: "exit"; exit_code: number; duration: string };

/** One line of `GET /execs/{exec_id}/output`. */
export type ExecOutputLine =
  | { stream: "stdout" | "stderr"; data: string; offset: number }
  | { stream: "stdout" | "stderr"; lost: number }
  | { stream: "exit"; exit_code: number; duration: string };
