// One sandbox: its details and lifecycle actions, kept current from its events; its resource use
// as sparklines; its terminal, files, exec history and logs.
import { useState } from "preact/hooks";
import { ApiError, call } from "./api";
import { LiveStatus, Problem, Sparkline, bytes } from "./components";
import { ExecHistory } from "./execs";
import { FileBrowser } from "./files";
import { useEvents, useInterval, useLoad } from "./hooks";
import { navigate } from "./nav";
import { TerminalPanel } from "./terminal";
import { relative, type Sandbox } from "./types";

export function SandboxPage(props: { id: string }) {
  const path = `/sandboxes/${encodeURIComponent(props.id)}`;
  const sandbox = useLoad<Sandbox>(path);
  const [error, setError] = useState("");
  const [execsChanged, setExecsChanged] = useState(0);
  const status = useEvents(`?sandbox_id=${encodeURIComponent(props.id)}`, (event) => {
    if (event.type.startsWith("sandbox.")) void sandbox.reload();
    if (event.type.startsWith("exec.")) setExecsChanged((n) => n + 1);
  });

  const act = async (method: string, route: string, body?: unknown) => {
    setError("");
    try {
      await call(method, route, body);
      await sandbox.reload();
      return true;
    } catch (e) {
      setError((e as ApiError).message);
      return false;
    }
  };

  const s = sandbox.data;
  if (!s) {
    return sandbox.error ? <Problem message={sandbox.error} /> : <p class="loading">Loading…</p>;
  }
  const ended = s.state === "destroyed" || s.state === "error";
  const rows: [string, string][] = [
    ["State", s.state],
    ["Reason", s.state_reason ?? "—"],
    ["Message", s.state_message ?? "—"],
    ["Provider", s.provider],
    ["Image", s.image],
    ["Template", s.template ?? "—"],
    ["Owner", s.owner_id || "—"],
    ["Tenant", s.tenant_id || "—"],
    ["Size", s.memory_mb ? `${s.memory_mb} MiB, ${s.vcpus ?? "?"} vCPU` : "—"],
    ["Created", `${s.created_at} (${relative(s.created_at)})`],
    ["Expires", ended ? "—" : `${s.expires_at} (${relative(s.expires_at)})`],
  ];
  return (
    <section aria-labelledby="sandbox-title">
      <div class="toolbar">
        <h1 id="sandbox-title">{s.id}</h1>
        <LiveStatus status={status} />
        {!ended && (
          <>
            <button type="button" class="secondary" onClick={() => act("POST", `${path}/extend`, { ttl: "30m" })}>
              Extend 30m
            </button>
            {s.state === "paused" ? (
              <button type="button" class="secondary" onClick={() => act("POST", `${path}/resume`)}>
                Resume
              </button>
            ) : (
              <button type="button" class="secondary" disabled={s.state !== "running"}
                onClick={() => act("POST", `${path}/pause`)}>
                Pause
              </button>
            )}
            <button
              type="button"
              class="danger"
              data-testid="destroy"
              onClick={async () => {
                if (await act("DELETE", path)) navigate("/ui");
              }}
            >
              Destroy
            </button>
          </>
        )}
      </div>
      <Problem message={error} />
      <dl class="details">
        {rows.map(([key, value]) => (
          <div key={key}>
            <dt>{key}</dt>
            <dd>{value}</dd>
          </div>
        ))}
      </dl>
      {s.state === "running" && <Stats path={path} />}
      {s.state === "running" && <TerminalPanel id={s.id} />}
      {s.state === "running" && <FileBrowser id={s.id} />}
      <ExecHistory path={path} changed={execsChanged} />
      <Logs path={path} />
    </section>
  );
}

type Stats = {
  cpu_percent: number;
  memory_bytes: number;
  memory_limit_bytes?: number | null;
  pids?: number | null;
  net_rx_bytes?: number | null;
  net_tx_bytes?: number | null;
};

/** How many samples the sparklines show (two minutes at one each two seconds). */
const SAMPLES = 60;

/** Resource use sampled every two seconds while shown. */
function Stats(props: { path: string }) {
  const [samples, setSamples] = useState<Stats[]>([]);
  const [problem, setProblem] = useState("");
  const sample = () => {
    if (problem) return;
    void call<Stats>("GET", `${props.path}/stats`)
      .then(({ data }) => setSamples((list) => [...list, data].slice(-SAMPLES)))
      .catch((e: ApiError) => setProblem(e.message));
  };
  useInterval(sample, 2000, true);
  const newest = samples[samples.length - 1];
  return (
    <section aria-labelledby="stats-title" class="panel">
      <h2 id="stats-title">Resources</h2>
      {problem ? (
        <p class="muted">{problem}</p>
      ) : (
        <div class="sparklines">
          <Sparkline label="CPU" values={samples.map((s) => s.cpu_percent)} format={(v) => `${v.toFixed(1)}%`} />
          <Sparkline label="Memory" values={samples.map((s) => s.memory_bytes)} format={bytes} />
          {newest?.pids != null && <p>Processes: {newest.pids}</p>}
          {newest?.net_rx_bytes != null && (
            <p>
              Network: {bytes(newest.net_rx_bytes)} in, {bytes(newest.net_tx_bytes ?? 0)} out
            </p>
          )}
        </div>
      )}
    </section>
  );
}

/** The sandbox's console or log lines (the newest 200), read again on demand. */
function Logs(props: { path: string }) {
  const logs = useLoad<string[]>(`${props.path}/logs?lines=200`);
  return (
    <section aria-labelledby="logs-title" class="panel">
      <div class="toolbar">
        <h2 id="logs-title">Logs</h2>
        <button type="button" class="secondary" aria-label="Refresh logs" onClick={() => void logs.reload()}>
          Refresh
        </button>
      </div>
      <Problem message={logs.error} />
      <pre class="output" tabIndex={0} role="region" aria-label="Log lines">
        {(logs.data ?? []).join("\n") || "No log lines."}
      </pre>
    </section>
  );
}
