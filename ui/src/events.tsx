// The event stream, newest first, filtered by type and by sandbox as the API filters it: the
// server's recent history, then live events.
import { memo } from "preact/compat";
import { useEffect, useRef, useState } from "preact/hooks";
import { LiveStatus, PageLink, Table } from "./components";
import { useEvents } from "./hooks";
import type { Event } from "./api";

/** How many events the page keeps; older ones fall off the end. */
const KEEP = 500;

export function EventsPage() {
  const [events, setEvents] = useState<Event[]>([]);
  const [types, setTypes] = useState("");
  const [sandbox, setSandbox] = useState("");
  const params = new URLSearchParams();
  if (types) params.set("types", types);
  if (sandbox) params.set("sandbox_id", sandbox);
  const query = params.toString() ? `?${params}` : "";
  // Events that arrive together are shown together, once per animation frame.
  const arrived = useRef<Event[]>([]);
  const frame = useRef(0);
  useEffect(() => () => cancelAnimationFrame(frame.current), []);
  // A new filter replays the history under it: start from empty (before the stream starts).
  useEffect(() => {
    arrived.current = [];
    setEvents([]);
  }, [query]);
  const status = useEvents(query, (event) => {
    arrived.current.push(event);
    if (frame.current) return;
    frame.current = requestAnimationFrame(() => {
      frame.current = 0;
      const batch = arrived.current.reverse();
      arrived.current = [];
      setEvents((list) => [...batch, ...list].slice(0, KEEP));
    });
  }, true);
  const text = (set: (value: string) => void) => (event: globalThis.Event) =>
    set((event.target as HTMLInputElement).value.replace(/\s+/g, ""));
  return (
    <section aria-labelledby="events-title">
      <div class="toolbar">
        <h1 id="events-title">Events</h1>
        <LiveStatus status={status} />
        <button type="button" class="secondary" onClick={() => setEvents([])}>
          Clear
        </button>
      </div>
      <form class="filters" aria-label="Filters" onSubmit={(e) => e.preventDefault()}>
        <label>
          Types (comma-separated)
          <input type="search" placeholder="sandbox.created,exec.completed" value={types} onChange={text(setTypes)} />
        </label>
        <label>
          Sandbox
          <input type="search" placeholder="sb-…" value={sandbox} onChange={text(setSandbox)} />
        </label>
      </form>
      <Table label="Events" columns={["Time", "Type", "Sandbox", "Data"]}>
        {events.map((event) => (
          <EventRow key={event.id} event={event} />
        ))}
      </Table>
      {events.length === 0 && <p class="muted">Waiting for events…</p>}
    </section>
  );
}

/** One event; an event never changes, so its row is rendered once. */
const EventRow = memo(function EventRow(props: { event: Event }) {
  const event = props.event;
  return (
    <tr data-testid="event-row" data-event-type={event.type} data-sandbox-id={event.sandbox_id || undefined}>
      <td>{new Date(event.timestamp).toLocaleTimeString()}</td>
      <td>{event.type}</td>
      <td>
        {event.sandbox_id ? <PageLink href={`/ui/sandboxes/${event.sandbox_id}`}>{event.sandbox_id}</PageLink> : "—"}
      </td>
      <td class="clip">
        <code>{event.data ? JSON.stringify(event.data) : ""}</code>
      </td>
    </tr>
  );
});
