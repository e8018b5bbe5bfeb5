// The live event stream, newest first, with a type filter.
import { useEffect, useState } from "preact/hooks";
import { followEvents, type Event } from "./api";

const KEEP = 500;

export function EventsPage() {
  const [events, setEvents] = useState<Event[]>([]);
  const [types, setTypes] = useState("");
  const [error, setError] = useState("");
  useEffect(() => {
    const stop = new AbortController();
    const query = types.trim() ? `?types=${encodeURIComponent(types.trim())}` : "";
    setError("");
    void followEvents(query, (event) => setEvents((list) => [event, ...list].slice(0, KEEP)), stop.signal).catch(
      (e: Error) => {
        if (e.name !== "AbortError") setError(e.message);
      },
    );
    return () => stop.abort();
  }, [types]);
  return (
    <section aria-labelledby="events-title">
      <div class="toolbar">
        <h1 id="events-title">Events</h1>
        <label>
          Types
          <input
            type="text"
            placeholder="sandbox.created,exec.completed"
            value={types}
            onChange={(e) => setTypes((e.target as HTMLInputElement).value)}
          />
        </label>
      </div>
      {error && (
        <p class="error" role="alert">
          {error}
        </p>
      )}
      <table>
        <thead>
          <tr>
            <th scope="col">Time</th>
            <th scope="col">Type</th>
            <th scope="col">Sandbox</th>
            <th scope="col">Data</th>
          </tr>
        </thead>
        <tbody>
          {events.map((event) => (
            <tr key={event.id} data-testid="event-row" data-event-type={event.type}>
              <td>{event.timestamp}</td>
              <td>{event.type}</td>
              <td>{event.sandbox_id || "—"}</td>
              <td>
                <code>{event.data ? JSON.stringify(event.data) : ""}</code>
              </td>
            </tr>
          ))}
        </tbody>
      </table>
      {events.length === 0 && <p>Waiting for events…</p>}
    </section>
  );
}
