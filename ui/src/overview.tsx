// Overview: the providers' health.
import { useEffect, useState } from "preact/hooks";
import { ApiError, call } from "./api";
import type { Provider } from "./types";

export function OverviewPage() {
  const [providers, setProviders] = useState<Provider[]>([]);
  const [error, setError] = useState("");
  useEffect(() => {
    void call<Provider[]>("GET", "/providers")
      .then(({ data }) => setProviders(data))
      .catch((e: ApiError) => setError(e.message));
  }, []);
  return (
    <section aria-labelledby="overview-title">
      <h1 id="overview-title">Overview</h1>
      {error && (
        <p class="error" role="alert">
          {error}
        </p>
      )}
      <h2>Providers</h2>
      <table>
        <thead>
          <tr>
            <th scope="col">Name</th>
            <th scope="col">Status</th>
          </tr>
        </thead>
        <tbody>
          {providers.map((p) => (
            <tr key={p.name}>
              <td>{p.name}</td>
              <td>{p.status ?? (p.healthy ? "healthy" : "unhealthy")}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </section>
  );
}
