// The sandbox list: pages of the API's list under the chosen filters, kept current from the
// event stream (each change refetches only the sandbox it names, never the whole list), with
// spawn, extend, pause, resume and destroy.
import { memo } from "preact/compat";
import { useCallback, useEffect, useRef, useState } from "preact/hooks";
import { ApiError, call, type Event } from "./api";
import { LiveStatus, PageLink, Problem, Table } from "./components";
import { useEvents, useInterval, useLoad } from "./hooks";
import { relative, type Sandbox, type Template } from "./types";

const LIVE =
  "?types=sandbox.created,sandbox.running,sandbox.destroyed,sandbox.error,sandbox.paused,sandbox.resumed";
const PAGE = 100;
const STATES = ["", "creating", "running", "paused", "error", "destroyed", "all"];
/** Changes that arrive together are fetched once, this long after the first. */
const BATCH_MS = 100;

type Filters = { state: string; owner: string; provider: string };

function query(filters: Filters, cursor: string | null): string {
  const params = new URLSearchParams({ limit: String(PAGE) });
  if (filters.state) params.set("state", filters.state);
  if (filters.owner) params.set("owner_id", filters.owner);
  if (filters.provider) params.set("provider", filters.provider);
  if (cursor) params.set("cursor", cursor);
  return `/sandboxes?${params}`;
}

/** Whether the list under `filters` holds `sandbox` (as the server's filter would). */
function matches(filters: Filters, sandbox: Sandbox): boolean {
  const state = filters.state
    ? filters.state === "all" || filters.state === sandbox.state
    : sandbox.state !== "destroyed";
  return (
    state &&
    (!filters.owner || sandbox.owner_id === filters.owner) &&
    (!filters.provider || sandbox.provider === filters.provider)
  );
}

/** Newest first, as the API lists (plain comparisons: `localeCompare` is far slower). */
const newestFirst = (a: Sandbox, b: Sandbox) => {
  const older = (x: string, y: string) => (x < y ? 1 : x > y ? -1 : 0);
  return older(a.created_at, b.created_at) || older(a.id, b.id);
};

export function SandboxList() {
  const [filters, setFilters] = useState<Filters>({ state: "", owner: "", provider: "" });
  const [sandboxes, setSandboxes] = useState<Sandbox[]>([]);
  const [next, setNext] = useState<string | null>(null);
  /** The page on screen (of PAGE rows): only it is rendered, however many are loaded. */
  const [shown, setShown] = useState(0);
  const [error, setError] = useState("");
  const [template, setTemplate] = useState("");
  const [busy, setBusy] = useState(false);
  const [now, setNow] = useState(Date.now());
  const templates = useLoad<Template[]>("/templates?limit=1000");
  const providers = useLoad<{ name: string }[]>("/providers");
  const current = useRef(filters);
  current.current = filters;
  useInterval(() => setNow(Date.now()), 10000);

  // Changes (a sandbox read again, or an id to drop) are applied together once per animation
  // frame: a burst of events costs one render of the list, not one per sandbox.
  const changes = useRef(new Map<string, Sandbox | null>());
  const frame = useRef(0);
  const change = (id: string, sandbox: Sandbox | null) => {
    changes.current.set(id, sandbox);
    if (frame.current) return;
    frame.current = requestAnimationFrame(() => {
      frame.current = 0;
      const batch = changes.current;
      changes.current = new Map();
      setSandboxes((list) => {
        const kept = list.filter((s) => !batch.has(s.id));
        const added = [...batch.values()].filter((s): s is Sandbox => s !== null && matches(current.current, s));
        if (added.length === 0 && kept.length === list.length) return list;
        return added.length ? [...kept, ...added].sort(newestFirst) : kept;
      });
    });
  };
  useEffect(() => () => cancelAnimationFrame(frame.current), []);
  const upsert = (sandbox: Sandbox) => change(sandbox.id, sandbox);
  const forget = (id: string) => change(id, null);

  const load = async (cursor: string | null) => {
    const asked = current.current;
    try {
      const page = await call<Sandbox[]>("GET", query(asked, cursor));
      if (current.current !== asked) return;
      setSandboxes((list) => {
        const known = new Map((cursor ? list : list.filter((s) => matches(asked, s))).map((s) => [s.id, s]));
        for (const sandbox of page.data) known.set(sandbox.id, sandbox);
        return [...known.values()].sort(newestFirst);
      });
      setNext(page.next);
      setError("");
    } catch (e) {
      setError((e as ApiError).message);
    }
  };
  useEffect(() => {
    setSandboxes([]);
    setNext(null);
    setShown(0);
    void load(null);
  }, [filters]);

  // Ids changed by events, fetched in one batch shortly after the first of them.
  const pending = useRef(new Set<string>());
  const refresh = () => {
    const ids = [...pending.current];
    pending.current.clear();
    for (const id of ids) {
      void call<Sandbox>("GET", `/sandboxes/${id}`)
        .then(({ data }) => upsert(data))
        .catch((e: ApiError) => {
          if (e.status === 404) forget(id);
        });
    }
  };
  const status = useEvents(LIVE, (event: Event) => {
    if (!event.sandbox_id) return;
    if (event.type === "sandbox.destroyed" && !["destroyed", "all"].includes(current.current.state)) {
      forget(event.sandbox_id);
      return;
    }
    if (pending.current.size === 0) setTimeout(refresh, BATCH_MS);
    pending.current.add(event.sandbox_id);
  });

  // One function for the page's life, so memoised rows are not rendered again for a new one.
  const act = useCallback<Act>(async (method, path, body) => {
    setError("");
    try {
      const { data } = await call<Sandbox | null>(method, path, body);
      if (method === "DELETE") forget(path.split("/")[2] ?? "");
      else if (data && "state" in data) upsert(data);
      return true;
    } catch (e) {
      setError((e as ApiError).message);
      return false;
    }
  }, []);

  const spawn = async () => {
    setBusy(true);
    await act("POST", template ? `/templates/${encodeURIComponent(template)}/spawn` : "/sandboxes", {});
    setBusy(false);
  };

  // The page shown stays in range as sandboxes come and go.
  const pages = Math.max(1, Math.ceil(sandboxes.length / PAGE));
  const page = Math.min(shown, pages - 1);
  const first = page * PAGE;
  const hasNext = page < pages - 1 || next !== null;
  const forward = async () => {
    if (page === pages - 1 && next) await load(next);
    setShown(page + 1);
  };

  const filter = (key: keyof Filters) => (event: globalThis.Event) =>
    setFilters({ ...filters, [key]: (event.target as HTMLInputElement).value.trim() });

  return (
    <section aria-labelledby="sandboxes-title">
      <div class="toolbar">
        <h1 id="sandboxes-title">Sandboxes</h1>
        <LiveStatus status={status} />
        <label>
          Template
          <select value={template} onChange={(e) => setTemplate((e.target as HTMLSelectElement).value)}>
            <option value="">(server defaults)</option>
            {(templates.data ?? []).map((t) => (
              <option key={t.name} value={t.name}>
                {t.name}
              </option>
            ))}
          </select>
        </label>
        <button type="button" data-testid="spawn" disabled={busy} onClick={spawn}>
          {busy ? "Spawning…" : "Spawn"}
        </button>
      </div>
      <form class="filters" aria-label="Filters" onSubmit={(e) => e.preventDefault()}>
        <label>
          State
          <select value={filters.state} onChange={filter("state")}>
            {STATES.map((state) => (
              <option key={state} value={state}>
                {state || "not destroyed"}
              </option>
            ))}
          </select>
        </label>
        <label>
          Owner
          <input type="search" value={filters.owner} placeholder="any" onChange={filter("owner")} />
        </label>
        <label>
          Provider
          <select value={filters.provider} onChange={filter("provider")}>
            <option value="">any</option>
            {(providers.data ?? []).map((p) => (
              <option key={p.name} value={p.name}>
                {p.name}
              </option>
            ))}
          </select>
        </label>
      </form>
      <Problem message={error} />
      <Table label="Sandboxes" columns={["ID", "State", "Owner", "Tenant", "Provider", "Image", "Age", "Expires", "Actions"]}>
        {sandboxes.slice(first, first + PAGE).map((s) => (
          <Row key={s.id} sandbox={s} now={now} act={act} />
        ))}
      </Table>
      <nav class="pager" aria-label="Pages of sandboxes">
        <button type="button" class="secondary" disabled={page === 0} onClick={() => setShown(page - 1)}>
          Previous
        </button>
        <span data-testid="sandbox-count" data-loaded={sandboxes.length}>
          {sandboxes.length === 0
            ? "No sandboxes."
            : `${first + 1}–${Math.min(first + PAGE, sandboxes.length)} of ${sandboxes.length}${next ? "+" : ""}`}
        </span>
        <button type="button" class="secondary" disabled={!hasNext} onClick={() => void forward()}>
          Next
        </button>
      </nav>
    </section>
  );
}

type Act = (method: string, path: string, body?: unknown) => Promise<boolean>;

/** One sandbox's row; rendered again only when its sandbox or the clock changes. */
const Row = memo(function Row(props: { sandbox: Sandbox; now: number; act: Act }) {
  const s = props.sandbox;
  const path = `/sandboxes/${s.id}`;
  const ended = s.state === "destroyed" || s.state === "error";
  return (
    <tr data-testid="sandbox-row" data-sandbox-id={s.id}>
      <td>
        <PageLink href={`/ui/sandboxes/${s.id}`}>{s.id}</PageLink>
      </td>
      <td>
        <span class={`state state-${s.state}`} title={s.state_reason ?? undefined}>
          {s.state}
        </span>
      </td>
      <td>{s.owner_id || "—"}</td>
      <td>{s.tenant_id || "—"}</td>
      <td>{s.provider}</td>
      <td class="clip">{s.image}</td>
      <td>{relative(s.created_at, props.now)}</td>
      <td>{ended ? "—" : relative(s.expires_at, props.now)}</td>
      <td class="actions">
        {!ended && (
          <>
            <button type="button" class="secondary" aria-label={`Extend 30m: ${s.id}`}
              onClick={() => void props.act("POST", `${path}/extend`, { ttl: "30m" })}>
              Extend 30m
            </button>
            {s.state === "paused" ? (
              <button type="button" class="secondary" aria-label={`Resume ${s.id}`}
                onClick={() => void props.act("POST", `${path}/resume`)}>
                Resume
              </button>
            ) : (
              <button type="button" class="secondary" aria-label={`Pause ${s.id}`} disabled={s.state !== "running"}
                onClick={() => void props.act("POST", `${path}/pause`)}>
                Pause
              </button>
            )}
            <button type="button" class="danger" aria-label={`Destroy ${s.id}`}
              onClick={() => void props.act("DELETE", path)}>
              Destroy
            </button>
          </>
        )}
      </td>
    </tr>
  );
});
