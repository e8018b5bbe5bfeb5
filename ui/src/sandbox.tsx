// One sandbox: its details and lifecycle actions.
import { useEffect, useState } from "preact/hooks";
import { ApiError, call } from "./api";
import { navigate } from "./nav";
import { FileBrowser } from "./files";
import { TerminalPanel } from "./terminal";
import { relative, type Sandbox } from "./types";

export function SandboxPage(props: { id: string }) {
  const [sandbox, setSandbox] = useState<Sandbox | null>(null);
  const [error, setError] = useState("");
  const load = () =>
    call<Sandbox>("GET", `/sandboxes/${props.id}`)
      .then(({ data }) => setSandbox(data))
      .catch((e: ApiError) => setError(e.message));
  useEffect(() => {
    void load();
  }, [props.id]);

  const act = async (method: string, path: string, body?: unknown) => {
    setError("");
    try {
      await call(method, path, body);
      await load();
    } catch (e) {
      setError((e as ApiError).message);
    }
  };

  if (!sandbox) {
    return error ? (
      <p class="error" role="alert">
        {error}
      </p>
    ) : (
      <p class="loading">Loading…</p>
    );
  }
  const rows: [string, string][] = [
    ["State", sandbox.state],
    ["Reason", sandbox.state_reason ?? "—"],
    ["Message", sandbox.state_message ?? "—"],
    ["Provider", sandbox.provider],
    ["Image", sandbox.image],
    ["Owner", sandbox.owner_id || "—"],
    ["Tenant", sandbox.tenant_id || "—"],
    ["Created", `${sandbox.created_at} (${relative(sandbox.created_at)})`],
    ["Expires", `${sandbox.expires_at} (${relative(sandbox.expires_at)})`],
  ];
  return (
    <section aria-labelledby="sandbox-title">
      <div class="toolbar">
        <h1 id="sandbox-title">{sandbox.id}</h1>
        <button type="button" class="secondary" onClick={() => act("POST", `/sandboxes/${sandbox.id}/extend`, { ttl: "30m" })}>
          Extend 30m
        </button>
        {sandbox.state === "paused" ? (
          <button type="button" class="secondary" onClick={() => act("POST", `/sandboxes/${sandbox.id}/resume`)}>
            Resume
          </button>
        ) : (
          <button type="button" class="secondary" onClick={() => act("POST", `/sandboxes/${sandbox.id}/pause`)}>
            Pause
          </button>
        )}
        <button
          type="button"
          data-testid="destroy"
          onClick={async () => {
            await act("DELETE", `/sandboxes/${sandbox.id}`);
            navigate("/ui");
          }}
        >
          Destroy
        </button>
      </div>
      {error && (
        <p class="error" role="alert">
          {error}
        </p>
      )}
      <dl class="details">
        {rows.map(([key, value]) => (
          <div key={key}>
            <dt>{key}</dt>
            <dd>{value}</dd>
          </div>
        ))}
      </dl>
      {sandbox.state === "running" && <TerminalPanel id={sandbox.id} />}
      {sandbox.state === "running" && <FileBrowser id={sandbox.id} />}
    </section>
  );
}
