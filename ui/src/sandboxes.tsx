// The sandbox list: the first page, then kept current from the event stream (each change
// refetches only the sandbox it names), with spawn and destroy.
import { useEffect, useState } from "preact/hooks";
import { ApiError, call, followEvents } from "./api";
import { navigate } from "./nav";
import { relative, type Sandbox, type Template } from "./types";

const LIVE = "?types=sandbox.created,sandbox.running,sandbox.destroyed,sandbox.error,sandbox.paused,sandbox.resumed";
const PAGE = 100;

export function SandboxList() {
  const [sandboxes, setSandboxes] = useState<Sandbox[]>([]);
  const [next, setNext] = useState<string | null>(null);
  const [error, setError] = useState("");
  const [templates, setTemplates] = useState<Template[]>([]);
  const [template, setTemplate] = useState("");
  const [busy, setBusy] = useState(false);

  const upsert = (sandbox: Sandbox) =>
    setSandboxes((list) => {
      const ended = sandbox.state === "destroyed" || sandbox.state === "error";
      const rest = list.filter((s) => s.id !== sandbox.id);
      return ended ? rest : [sandbox, ...rest].sort((a, b) => b.created_at.localeCompare(a.created_at));
    });

  useEffect(() => {
    const stop = new AbortController();
    void call<Sandbox[]>("GET", `/sandboxes?limit=${PAGE}`)
      .then(({ data, next }) => {
        setSandboxes((known) => {
          const ids = new Set(known.map((s) => s.id));
          return [...known, ...data.filter((s) => !ids.has(s.id))];
        });
        setNext(next);
      })
      .catch((e: ApiError) => setError(e.message));
    void call<Template[]>("GET", "/templates").then(({ data }) => setTemplates(data)).catch(() => {});
    void followEvents(
      LIVE,
      (event) => {
        if (!event.sandbox_id) return;
        void call<Sandbox>("GET", `/sandboxes/${event.sandbox_id}`)
          .then(({ data }) => upsert(data))
          .catch(() => {});
      },
      stop.signal,
    ).catch(() => {});
    return () => stop.abort();
  }, []);

  const more = async () => {
    if (!next) return;
    const page = await call<Sandbox[]>("GET", `/sandboxes?limit=${PAGE}&cursor=${encodeURIComponent(next)}`);
    setSandboxes((list) => [...list, ...page.data.filter((s) => !list.some((k) => k.id === s.id))]);
    setNext(page.next);
  };

  const spawn = async () => {
    setBusy(true);
    setError("");
    try {
      const path = template ? `/templates/${encodeURIComponent(template)}/spawn` : "/sandboxes";
      const { data } = await call<Sandbox>("POST", path, {});
      upsert(data);
    } catch (e) {
      setError((e as ApiError).message);
    } finally {
      setBusy(false);
    }
  };

  const destroy = async (id: string) => {
    try {
      await call("DELETE", `/sandboxes/${id}`);
      setSandboxes((list) => list.filter((s) => s.id !== id));
    } catch (e) {
      setError((e as ApiError).message);
    }
  };

  return (
    <section aria-labelledby="sandboxes-title">
      <div class="toolbar">
        <h1 id="sandboxes-title">Sandboxes</h1>
        <label>
          Template
          <select value={template} onChange={(e) => setTemplate((e.target as HTMLSelectElement).value)}>
            <option value="">(server defaults)</option>
            {templates.map((t) => (
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
      {error && (
        <p class="error" role="alert">
          {error}
        </p>
      )}
      <table>
        <thead>
          <tr>
            <th scope="col">ID</th>
            <th scope="col">State</th>
            <th scope="col">Owner</th>
            <th scope="col">Tenant</th>
            <th scope="col">Provider</th>
            <th scope="col">Image</th>
            <th scope="col">Age</th>
            <th scope="col">Expires</th>
            <th scope="col">
              <span class="visually-hidden">Actions</span>
            </th>
          </tr>
        </thead>
        <tbody>
          {sandboxes.map((s) => (
            <tr key={s.id} data-testid="sandbox-row" data-sandbox-id={s.id}>
              <td>
                <a
                  href={`/ui/sandboxes/${s.id}`}
                  onClick={(e) => {
                    e.preventDefault();
                    navigate(`/ui/sandboxes/${s.id}`);
                  }}
                >
                  {s.id}
                </a>
              </td>
              <td>
                <span class={`state state-${s.state}`}>{s.state}</span>
              </td>
              <td>{s.owner_id || "—"}</td>
              <td>{s.tenant_id || "—"}</td>
              <td>{s.provider}</td>
              <td>{s.image}</td>
              <td>{relative(s.created_at)}</td>
              <td>{relative(s.expires_at)}</td>
              <td>
                <button type="button" class="secondary" onClick={() => destroy(s.id)} aria-label={`Destroy ${s.id}`}>
                  Destroy
                </button>
              </td>
            </tr>
          ))}
        </tbody>
      </table>
      {sandboxes.length === 0 && !error && <p>No sandboxes run.</p>}
      {next && (
        <button type="button" class="secondary" onClick={more}>
          More
        </button>
      )}
    </section>
  );
}
