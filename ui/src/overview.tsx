// Overview: the providers' health, sandboxes by state, the spawn queue, quotas and their usage,
// and request rates from the metrics, read again every five seconds while shown.
import { useEffect, useRef, useState } from "preact/hooks";
import { call, scrape, type ApiError } from "./api";
import { Problem, Sparkline, Table } from "./components";
import { useInterval, useLoad, type Loaded } from "./hooks";
import type { Provider } from "./types";

type Diagnostics = {
  sandboxes: { total: number; active: number; by_state: Record<string, number>; by_provider: Record<string, number> };
  scheduler: { spawn_queue_depth: number; max_spawn_queue: number; spawn_overflow: string; spawn_queue_timeouts: number };
  limits: { max_sandboxes: number; max_sandboxes_per_owner: number; max_ttl: string };
  rate_limit: { enabled: boolean; requests_per_minute: number; allowed_total: number; limited_total: number };
  workers: { total: number; online: number };
  providers: Provider[];
};

type Quota = { owner_id: string; max_sandboxes: number; max_ttl: string; max_exec_timeout: string };
type Usage = { owner_id: string; active_sandboxes: number; max_sandboxes: number };

/** Quotas shown with their usage (each usage is one more request). */
const QUOTAS_SHOWN = 20;
const POLL_MS = 5000;

export function OverviewPage() {
  const diagnostics = useLoad<Diagnostics>("/diagnostics");
  // The diagnostics carry the providers' summaries; only a credential that may not read them
  // asks for the providers on their own.
  const providers = useLoad<Provider[]>(diagnostics.forbidden ? "/providers" : null);
  useInterval(() => {
    void diagnostics.reload();
    void providers.reload();
  }, POLL_MS);
  return (
    <section aria-labelledby="overview-title">
      <h1 id="overview-title">Overview</h1>
      <div class="cards">
        <Providers
          providers={diagnostics.data?.providers ?? providers.data ?? []}
          loaded={diagnostics.forbidden ? providers : diagnostics}
        />
        <Sandboxes diagnostics={diagnostics} />
        <Requests />
      </div>
      <Quotas />
    </section>
  );
}

function Unavailable(props: { loaded: Loaded<unknown> }) {
  if (props.loaded.forbidden) return <p class="muted">Not visible to this credential.</p>;
  return <Problem message={props.loaded.error} />;
}

function Providers(props: { providers: Provider[]; loaded: Loaded<unknown> }) {
  return (
    <section aria-labelledby="providers-title" class="card">
      <h2 id="providers-title">Providers</h2>
      <Unavailable loaded={props.loaded} />
      <Table label="Providers" columns={["Name", "Health", "Latency"]}>
        {props.providers.map((p) => (
          <tr key={p.name}>
            <td>
              {p.name}
              {p.default && <span class="muted"> (default)</span>}
            </td>
            <td>
              <span class={`state ${p.healthy ? "state-running" : "state-error"}`} title={p.error ?? undefined}>
                {p.healthy ? "healthy" : "unhealthy"}
              </span>
            </td>
            <td>{p.latency_ms ?? "—"} ms</td>
          </tr>
        ))}
      </Table>
    </section>
  );
}

function Sandboxes(props: { diagnostics: Loaded<Diagnostics> }) {
  const d = props.diagnostics.data;
  return (
    <section aria-labelledby="capacity-title" class="card">
      <h2 id="capacity-title">Sandboxes and queue</h2>
      <Unavailable loaded={props.diagnostics} />
      {d && (
        <dl class="details">
          <div>
            <dt>Active</dt>
            <dd>
              {d.sandboxes.active}
              {d.limits.max_sandboxes > 0 && ` of ${d.limits.max_sandboxes}`}
            </dd>
          </div>
          {Object.entries(d.sandboxes.by_state).map(([state, count]) => (
            <div key={state}>
              <dt>{state}</dt>
              <dd>{count}</dd>
            </div>
          ))}
          <div>
            <dt>Spawn queue</dt>
            <dd>
              {d.scheduler.spawn_queue_depth} waiting ({d.scheduler.spawn_overflow}, at most {d.scheduler.max_spawn_queue})
            </dd>
          </div>
          <div>
            <dt>Queue timeouts</dt>
            <dd>{d.scheduler.spawn_queue_timeouts}</dd>
          </div>
          <div>
            <dt>Workers online</dt>
            <dd>
              {d.workers.online} of {d.workers.total}
            </dd>
          </div>
          <div>
            <dt>Rate limit</dt>
            <dd>
              {d.rate_limit.enabled
                ? `${d.rate_limit.requests_per_minute}/min; ${d.rate_limit.limited_total} refused`
                : "off"}
            </dd>
          </div>
        </dl>
      )}
    </section>
  );
}

/** `svc_http_requests_total` of a scrape: the total, the server errors, and each route's count. */
export function requestCounts(text: string): { total: number; errors: number; routes: Map<string, number> } {
  const routes = new Map<string, number>();
  let total = 0;
  let errors = 0;
  for (const line of text.split("\n")) {
    if (!line.startsWith("svc_http_requests_total{")) continue;
    const labels = line.slice(line.indexOf("{") + 1, line.lastIndexOf("}"));
    const value = Number(line.slice(line.lastIndexOf("}") + 1));
    if (!Number.isFinite(value)) continue;
    const label = (name: string) => new RegExp(`${name}="([^"]*)"`).exec(labels)?.[1] ?? "";
    const route = `${label("method")} ${label("route")}`;
    routes.set(route, (routes.get(route) ?? 0) + value);
    total += value;
    if (label("status").startsWith("5")) errors += value;
  }
  return { total, errors, routes };
}

type Rates = { total: number; errors: number; routes: [string, number][] };

/** Requests per second over the last interval, from two scrapes of the text metrics. */
function Requests() {
  const [history, setHistory] = useState<number[]>([]);
  const [rates, setRates] = useState<Rates | null>(null);
  const [error, setError] = useState("");
  const last = useRef<{ at: number; counts: ReturnType<typeof requestCounts> } | null>(null);
  const sample = () =>
    void scrape()
      .then((text) => {
        const counts = requestCounts(text);
        const at = performance.now();
        const before = last.current;
        last.current = { at, counts };
        if (!before) return;
        const seconds = (at - before.at) / 1000;
        const per = (now: number, then: number) => Math.max(0, now - then) / seconds;
        const routes = [...counts.routes]
          .map(([route, count]): [string, number] => [route, per(count, before.counts.routes.get(route) ?? 0)])
          .filter(([, rate]) => rate > 0)
          .sort((a, b) => b[1] - a[1])
          .slice(0, 8);
        const total = per(counts.total, before.counts.total);
        setRates({ total, errors: per(counts.errors, before.counts.errors), routes });
        setHistory((list) => [...list, total].slice(-60));
        setError("");
      })
      .catch((e: ApiError) => setError(e.status === 403 ? "Not visible to this credential." : e.message));
  useInterval(sample, POLL_MS, true);
  return (
    <section aria-labelledby="requests-title" class="card">
      <h2 id="requests-title">Requests</h2>
      {error && <p class="muted">{error}</p>}
      <Sparkline label="Requests" values={history} format={(v) => `${v.toFixed(1)}/s`} />
      {rates && (
        <>
          <p>Server errors: {rates.errors.toFixed(2)}/s</p>
          <Table label="Request rates" columns={["Route", "Per second"]}>
            {rates.routes.map(([route, rate]) => (
              <tr key={route}>
                <td class="clip">
                  <code>{route}</code>
                </td>
                <td>{rate.toFixed(2)}</td>
              </tr>
            ))}
          </Table>
        </>
      )}
      {!rates && !error && <p class="muted">Measuring…</p>}
    </section>
  );
}

/** Owners' quotas, the first of them with their usage. */
function Quotas() {
  const quotas = useLoad<Quota[]>(`/quotas?limit=${QUOTAS_SHOWN}`);
  const [usage, setUsage] = useState<Record<string, Usage>>({});
  useEffect(() => {
    const owners = (quotas.data ?? []).map((q) => q.owner_id);
    void Promise.all(
      owners.map((owner) =>
        call<Usage>("GET", `/quotas/${encodeURIComponent(owner)}/usage`)
          .then(({ data }) => data)
          .catch(() => null),
      ),
    ).then((found) => setUsage(Object.fromEntries(found.filter((u) => u !== null).map((u) => [u.owner_id, u]))));
  }, [quotas.data]);
  return (
    <section aria-labelledby="quotas-title" class="panel">
      <h2 id="quotas-title">Quotas</h2>
      <Unavailable loaded={quotas} />
      <Table label="Quotas" columns={["Owner", "Sandboxes", "Max TTL", "Max exec timeout"]}>
        {(quotas.data ?? []).map((q) => {
          const used = usage[q.owner_id];
          return (
            <tr key={q.owner_id}>
              <td>{q.owner_id}</td>
              <td>
                {used ? used.active_sandboxes : "…"} of {q.max_sandboxes || "∞"}
              </td>
              <td>{q.max_ttl || "—"}</td>
              <td>{q.max_exec_timeout || "—"}</td>
            </tr>
          );
        })}
      </Table>
      {quotas.data?.length === 0 && <p class="muted">No owner has a quota; the global limits apply.</p>}
    </section>
  );
}
