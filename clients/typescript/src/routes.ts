// Every HTTP route the SDK calls, in one table. `tsc` checks each entry against the generated
// `paths` of the server's OpenAPI document (a path or method that is not there fails the build),
// and `npm run check-openapi` checks the same against the live document.
import type { paths } from "./openapi.js";

export type Method = "GET" | "POST" | "PUT" | "DELETE";

/** A method and path template that the OpenAPI document declares. */
export type DeclaredRoute = {
  [P in keyof paths]: {
    [M in Method]: NonNullable<paths[P][Lowercase<M>]> extends never ? never : { method: M; path: P };
  }[Method];
}[keyof paths];

export const routes = {
  health: { method: "GET", path: "/api/v1/health" },
  ready: { method: "GET", path: "/api/v1/ready" },
  events: { method: "GET", path: "/api/v1/events" },
  providersList: { method: "GET", path: "/api/v1/providers" },
  providerGet: { method: "GET", path: "/api/v1/providers/{name}" },

  sandboxCreate: { method: "POST", path: "/api/v1/sandboxes" },
  sandboxAdmission: { method: "POST", path: "/api/v1/sandboxes/admission" },
  sandboxList: { method: "GET", path: "/api/v1/sandboxes" },
  sandboxPrune: { method: "DELETE", path: "/api/v1/sandboxes" },
  sandboxGet: { method: "GET", path: "/api/v1/sandboxes/{id}" },
  sandboxDestroy: { method: "DELETE", path: "/api/v1/sandboxes/{id}" },
  sandboxExtend: { method: "POST", path: "/api/v1/sandboxes/{id}/extend" },
  sandboxPause: { method: "POST", path: "/api/v1/sandboxes/{id}/pause" },
  sandboxResume: { method: "POST", path: "/api/v1/sandboxes/{id}/resume" },
  sandboxLogs: { method: "GET", path: "/api/v1/sandboxes/{id}/logs" },
  sandboxStats: { method: "GET", path: "/api/v1/sandboxes/{id}/stats" },
  previewTokenCreate: { method: "POST", path: "/api/v1/sandboxes/{id}/preview-tokens" },

  exec: { method: "POST", path: "/api/v1/sandboxes/{id}/exec" },
  execWs: { method: "GET", path: "/api/v1/sandboxes/{id}/exec/ws" },
  execList: { method: "GET", path: "/api/v1/sandboxes/{id}/execs" },
  execGet: { method: "GET", path: "/api/v1/sandboxes/{id}/execs/{exec_id}" },
  execKill: { method: "DELETE", path: "/api/v1/sandboxes/{id}/execs/{exec_id}" },
  execOutput: { method: "GET", path: "/api/v1/sandboxes/{id}/execs/{exec_id}/output" },
  execStdin: { method: "POST", path: "/api/v1/sandboxes/{id}/execs/{exec_id}/stdin" },
  execSignal: { method: "POST", path: "/api/v1/sandboxes/{id}/execs/{exec_id}/signal" },

  fileRead: { method: "GET", path: "/api/v1/sandboxes/{id}/files" },
  fileUpload: { method: "PUT", path: "/api/v1/sandboxes/{id}/files" },
  fileWrite: { method: "POST", path: "/api/v1/sandboxes/{id}/files" },
  fileRemove: { method: "DELETE", path: "/api/v1/sandboxes/{id}/files" },
  fileList: { method: "GET", path: "/api/v1/sandboxes/{id}/files/list" },
  fileStat: { method: "GET", path: "/api/v1/sandboxes/{id}/files/stat" },
  fileGlob: { method: "GET", path: "/api/v1/sandboxes/{id}/files/glob" },
  fileMove: { method: "POST", path: "/api/v1/sandboxes/{id}/files/move" },
  fileChmod: { method: "POST", path: "/api/v1/sandboxes/{id}/files/chmod" },
  archiveRead: { method: "GET", path: "/api/v1/sandboxes/{id}/files/archive" },
  archiveWrite: { method: "PUT", path: "/api/v1/sandboxes/{id}/files/archive" },

  templateCreate: { method: "POST", path: "/api/v1/templates" },
  templateList: { method: "GET", path: "/api/v1/templates" },
  templateGet: { method: "GET", path: "/api/v1/templates/{name}" },
  templateUpdate: { method: "PUT", path: "/api/v1/templates/{name}" },
  templateDelete: { method: "DELETE", path: "/api/v1/templates/{name}" },
  templateSpawn: { method: "POST", path: "/api/v1/templates/{name}/spawn" },
  templateBuild: { method: "POST", path: "/api/v1/templates/{name}/build" },
  templateBuildList: { method: "GET", path: "/api/v1/templates/{name}/builds" },
  templateBuildGet: { method: "GET", path: "/api/v1/templates/{name}/builds/{build_id}" },
  templateBuildCancel: { method: "DELETE", path: "/api/v1/templates/{name}/builds/{build_id}" },
  templateBuildLogs: { method: "GET", path: "/api/v1/templates/{name}/builds/{build_id}/logs" },

  quotaList: { method: "GET", path: "/api/v1/quotas" },
  quotaSummary: { method: "GET", path: "/api/v1/quotas/summary" },
  quotaGet: { method: "GET", path: "/api/v1/quotas/{ownerID}" },
  quotaSet: { method: "PUT", path: "/api/v1/quotas/{ownerID}" },
  quotaDelete: { method: "DELETE", path: "/api/v1/quotas/{ownerID}" },
  quotaUsage: { method: "GET", path: "/api/v1/quotas/{ownerID}/usage" },
} as const satisfies Record<string, DeclaredRoute>;

export type RouteName = keyof typeof routes;
export type Route<N extends RouteName> = (typeof routes)[N];
export type RoutePath<N extends RouteName> = Route<N>["path"];
/** The OpenAPI operation of a route. */
export type Operation<N extends RouteName> = NonNullable<paths[RoutePath<N>][Lowercase<Route<N>["method"]>]>;
