// What every page does the same way: load a resource on mount (and again on demand), follow the
// event stream, and poll while shown.
import { useEffect, useRef, useState } from "preact/hooks";
import { ApiError, call, followEvents, type Event, type StreamStatus } from "./api";

export type Loaded<T> = {
  data: T | null;
  /** The refusal's message when the last load failed. */
  error: string;
  /** Whether the last load was refused for the caller's role (403). */
  forbidden: boolean;
  reload: () => Promise<void>;
};

/** `GET path` when the page mounts or `path` changes; `null` loads nothing. */
export function useLoad<T>(path: string | null): Loaded<T> {
  const [data, setData] = useState<T | null>(null);
  const [error, setError] = useState("");
  const [forbidden, setForbidden] = useState(false);
  const current = useRef(path);
  current.current = path;
  const reload = async () => {
    if (path === null) return;
    try {
      const { data } = await call<T>("GET", path);
      if (current.current !== path) return;
      setData(data);
      setError("");
      setForbidden(false);
    } catch (e) {
      if (current.current !== path) return;
      setError((e as ApiError).message);
      setForbidden((e as ApiError).status === 403);
    }
  };
  useEffect(() => {
    setData(null);
    void reload();
  }, [path]);
  return { data, error, forbidden, reload };
}

/**
 * Follows the events `query` selects while the page is shown, calling the latest `onEvent` for
 * each; answers the stream's status (shown as "live" once subscribed).
 */
export function useEvents(query: string, onEvent: (event: Event) => void, replay = false): StreamStatus {
  // The status belongs to the query it was reported for: a new query is "connecting" from its
  // first render, not "live" on the strength of the stream it replaces.
  const [state, setState] = useState<{ query: string; status: StreamStatus }>({ query, status: "connecting" });
  const handler = useRef(onEvent);
  handler.current = onEvent;
  useEffect(() => {
    const stop = new AbortController();
    const report = (status: StreamStatus) => setState({ query, status });
    void followEvents(query, (event) => handler.current(event), report, stop.signal, replay);
    return () => stop.abort();
  }, [query]);
  return state.query === query ? state.status : "connecting";
}

/**
 * Calls `tick` every `ms` while the page is shown and the browser tab is visible; with
 * `immediately`, also once when the page mounts.
 */
export function useInterval(tick: () => void, ms: number, immediately = false): void {
  const handler = useRef(tick);
  handler.current = tick;
  useEffect(() => {
    if (immediately) handler.current();
    const timer = setInterval(() => {
      if (document.visibilityState === "visible") handler.current();
    }, ms);
    return () => clearInterval(timer);
  }, [ms]);
}
