// Templates: what each spawns.
import { useEffect, useState } from "preact/hooks";
import { ApiError, call } from "./api";
import type { Template } from "./types";

export function TemplatesPage() {
  const [templates, setTemplates] = useState<Template[]>([]);
  const [error, setError] = useState("");
  useEffect(() => {
    void call<Template[]>("GET", "/templates")
      .then(({ data }) => setTemplates(data))
      .catch((e: ApiError) => setError(e.message));
  }, []);
  return (
    <section aria-labelledby="templates-title">
      <h1 id="templates-title">Templates</h1>
      {error && (
        <p class="error" role="alert">
          {error}
        </p>
      )}
      <table>
        <thead>
          <tr>
            <th scope="col">Name</th>
            <th scope="col">Image</th>
            <th scope="col">Provider</th>
            <th scope="col">Memory</th>
            <th scope="col">vCPUs</th>
            <th scope="col">TTL</th>
            <th scope="col">Warm</th>
          </tr>
        </thead>
        <tbody>
          {templates.map((t) => (
            <tr key={t.name}>
              <td>{t.name}</td>
              <td>{t.image}</td>
              <td>{t.provider}</td>
              <td>{t.memory_mb} MiB</td>
              <td>{t.vcpus}</td>
              <td>{t.ttl}</td>
              <td>
                {t.warm_ready}/{t.warm_pool}
              </td>
            </tr>
          ))}
        </tbody>
      </table>
      {templates.length === 0 && !error && <p>No templates.</p>}
    </section>
  );
}
