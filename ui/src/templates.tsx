// Templates: what each spawns; create and edit one; its image builds, with a build's log
// followed live.
import { useEffect, useState } from "preact/hooks";
import { ApiError, call, followLines } from "./api";
import { bytes, Problem, Table } from "./components";
import { useEvents, useLoad } from "./hooks";
import type { Template } from "./types";

export function TemplatesPage() {
  const templates = useLoad<Template[]>("/templates?limit=1000");
  const [selected, setSelected] = useState<string | null>(null);
  const [creating, setCreating] = useState(false);
  const chosen = templates.data?.find((t) => t.name === selected) ?? null;
  return (
    <section aria-labelledby="templates-title">
      <div class="toolbar">
        <h1 id="templates-title">Templates</h1>
        <button type="button" class="secondary" onClick={() => { setCreating(true); setSelected(null); }}>
          New template
        </button>
      </div>
      <Problem message={templates.error} />
      <Table label="Templates" columns={["Name", "Image", "Provider", "Memory", "vCPUs", "TTL", "Warm", "Actions"]}>
        {(templates.data ?? []).map((t) => (
          <tr key={t.name} data-testid="template-row" class={t.name === selected ? "selected" : undefined}>
            <td>{t.name}</td>
            <td class="clip">{t.image}</td>
            <td>{t.provider}</td>
            <td>{t.memory_mb} MiB</td>
            <td>{t.vcpus}</td>
            <td>{t.ttl}</td>
            <td>
              {t.warm_ready}/{t.warm_pool}
            </td>
            <td>
              <button type="button" class="secondary" aria-label={`Edit ${t.name} and its builds`}
                onClick={() => { setSelected(t.name); setCreating(false); }}>
                Edit
              </button>
            </td>
          </tr>
        ))}
      </Table>
      {templates.data?.length === 0 && <p class="muted">No templates.</p>}
      {creating && (
        <TemplateForm
          template={null}
          onSaved={(name) => {
            setCreating(false);
            setSelected(name);
            void templates.reload();
          }}
        />
      )}
      {chosen && (
        <>
          <TemplateForm key={chosen.name} template={chosen} onSaved={() => void templates.reload()} />
          <Builds key={`builds-${chosen.name}`} template={chosen.name} image={chosen.image} onBuilt={() => void templates.reload()} />
        </>
      )}
    </section>
  );
}

type Fields = { name: string; image: string; provider: string; memory_mb: string; vcpus: string; ttl: string; warm_pool: string };

/** Creates a template (`template` null) or changes one (`PUT`, its name fixed). */
function TemplateForm(props: { template: Template | null; onSaved: (name: string) => void }) {
  const t = props.template;
  const [fields, setFields] = useState<Fields>({
    name: t?.name ?? "",
    image: t?.image ?? "",
    provider: t?.provider ?? "",
    memory_mb: t ? String(t.memory_mb) : "",
    vcpus: t ? String(t.vcpus) : "",
    ttl: t?.ttl ?? "",
    warm_pool: t ? String(t.warm_pool) : "0",
  });
  const [error, setError] = useState("");
  const [saved, setSaved] = useState("");
  const field = (key: keyof Fields, label: string, type = "text") => (
    <label>
      {label}
      <input
        type={type}
        name={key}
        value={fields[key]}
        disabled={key === "name" && t !== null}
        required={key === "name"}
        onInput={(e) => setFields({ ...fields, [key]: (e.target as HTMLInputElement).value })}
      />
    </label>
  );
  const submit = async (event: Event) => {
    event.preventDefault();
    setError("");
    setSaved("");
    const number = (text: string) => (text.trim() === "" ? undefined : Number(text));
    const body = {
      name: t ? undefined : fields.name.trim(),
      image: fields.image.trim() || undefined,
      provider: fields.provider.trim() || undefined,
      memory_mb: number(fields.memory_mb),
      vcpus: number(fields.vcpus),
      ttl: fields.ttl.trim() || undefined,
      warm_pool: number(fields.warm_pool),
    };
    try {
      const { data } = t
        ? await call<Template>("PUT", `/templates/${encodeURIComponent(t.name)}`, body)
        : await call<Template>("POST", "/templates", body);
      setSaved(`Saved ${data.name}.`);
      props.onSaved(data.name);
    } catch (e) {
      setError((e as ApiError).message);
    }
  };
  return (
    <form class="panel editor" aria-labelledby="template-form-title" onSubmit={submit}>
      <h2 id="template-form-title">{t ? `Edit ${t.name}` : "New template"}</h2>
      <div class="fields">
        {field("name", "Name")}
        {field("image", "Image")}
        {field("provider", "Provider")}
        {field("memory_mb", "Memory (MiB)", "number")}
        {field("vcpus", "vCPUs", "number")}
        {field("ttl", "TTL (e.g. 30m)")}
        {field("warm_pool", "Warm pool", "number")}
      </div>
      <Problem message={error} />
      {saved && <p role="status">{saved}</p>}
      <button type="submit">{t ? "Save" : "Create"}</button>
    </form>
  );
}

type Build = {
  build_id: string;
  template: string;
  status: string;
  image: string | null;
  started_at: string;
  ended_at: string | null;
  error: string | null;
};

/** A template's builds (kept current from its build events), a new build, and one's log. */
function Builds(props: { template: string; image: string; onBuilt: () => void }) {
  const base = `/templates/${encodeURIComponent(props.template)}/builds`;
  const builds = useLoad<Build[]>(base);
  const [shown, setShown] = useState<string | null>(null);
  const [dockerfile, setDockerfile] = useState(`FROM ${props.image}\n`);
  const [error, setError] = useState("");
  useEvents("?types=template.build_started,template.build_succeeded,template.build_failed", (event) => {
    if (event.data?.["template"] !== props.template) return;
    void builds.reload();
    if (event.type === "template.build_succeeded") props.onBuilt();
  });
  const start = async (event: Event) => {
    event.preventDefault();
    setError("");
    try {
      const { data } = await call<{ build_id: string }>("POST", `/templates/${encodeURIComponent(props.template)}/build`, {
        dockerfile,
        files: {},
      });
      setShown(data.build_id);
      await builds.reload();
    } catch (e) {
      setError((e as ApiError).message);
    }
  };
  const cancel = async (id: string) => {
    try {
      await call("DELETE", `${base}/${id}`);
      await builds.reload();
    } catch (e) {
      setError((e as ApiError).message);
    }
  };
  return (
    <section class="panel" aria-labelledby="builds-title">
      <h2 id="builds-title">Builds of {props.template}</h2>
      <form onSubmit={start} class="editor">
        <label>
          Dockerfile
          <textarea rows={4} value={dockerfile} onInput={(e) => setDockerfile((e.target as HTMLTextAreaElement).value)} />
        </label>
        <button type="submit">Build</button>
      </form>
      <Problem message={error || builds.error} />
      <Table label="Builds" columns={["Build", "Status", "Started", "Image or error", "Actions"]}>
        {(builds.data ?? []).map((b) => (
          <tr key={b.build_id} data-testid="build-row" data-build-id={b.build_id}>
            <td>
              <code>{b.build_id}</code>
            </td>
            <td>
              <span class={`state state-${b.status}`}>{b.status}</span>
            </td>
            <td>{new Date(b.started_at).toLocaleString()}</td>
            <td class="clip">{b.error ?? b.image ?? "—"}</td>
            <td class="actions">
              <button type="button" class="secondary" aria-expanded={shown === b.build_id}
                aria-label={`Log of ${b.build_id}`} onClick={() => setShown(shown === b.build_id ? null : b.build_id)}>
                Log
              </button>
              {b.status === "running" && (
                <button type="button" class="danger" aria-label={`Cancel ${b.build_id}`} onClick={() => void cancel(b.build_id)}>
                  Cancel
                </button>
              )}
            </td>
          </tr>
        ))}
      </Table>
      {builds.data?.length === 0 && <p class="muted">No builds yet.</p>}
      {shown && <BuildLog key={shown} path={`${base}/${shown}/logs`} />}
    </section>
  );
}

type BuildLine =
  | { type: "step"; step: number; instruction: string }
  | { type: "output"; data: string }
  | { type: "progress"; current_bytes: number; total_bytes: number }
  | { type: "result"; status: string; image?: string; error?: string };

/** A build's log, followed until its result. */
function BuildLog(props: { path: string }) {
  const [lines, setLines] = useState<string[]>([]);
  const [progress, setProgress] = useState("");
  const [error, setError] = useState("");
  useEffect(() => {
    const stop = new AbortController();
    const add = (line: string) => setLines((list) => [...list, line].slice(-2000));
    void followLines<BuildLine>(
      `${props.path}?follow=true`,
      (line) => {
        if (line.type === "step") add(`Step ${line.step}: ${line.instruction}`);
        else if (line.type === "output") add(line.data.replace(/\n$/, ""));
        else if (line.type === "progress") setProgress(`${bytes(line.current_bytes)} of ${bytes(line.total_bytes)}`);
        else add(`Result: ${line.status}${line.image ? ` (${line.image})` : ""}${line.error ? `: ${line.error}` : ""}`);
      },
      stop.signal,
    ).catch((e: Error) => {
      if (e.name !== "AbortError") setError(e.message);
    });
    return () => stop.abort();
  }, [props.path]);
  return (
    <div>
      <Problem message={error} />
      {progress && <p role="status">Pulling: {progress}</p>}
      <pre class="output" tabIndex={0} role="log" aria-label="Build log" data-testid="build-log">
        {lines.join("\n")}
      </pre>
    </div>
  );
}
