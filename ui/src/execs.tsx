// A sandbox's exec history (its exec jobs, newest first) and the output of one of them, followed
// live while it runs.
import { useEffect, useState } from "preact/hooks";
import { followLines } from "./api";
import { bytes, Problem, Table } from "./components";
import { useLoad } from "./hooks";
import { relative } from "./types";

type ExecRecord = {
  exec_id: string;
  command: string;
  args?: string[] | null;
  background: boolean;
  status: string;
  exit_code: number | null;
  started_at: string;
  ended_at: string | null;
  stdout_bytes: number;
  stderr_bytes: number;
};

type OutputLine =
  | { stream: "stdout" | "stderr"; data: string; offset: number }
  | { stream: "stdout" | "stderr"; lost: number }
  | { stream: "exit"; exit_code: number; duration: string };

/** What the output panel keeps of one exec: its newest characters, at most this many. */
const KEEP_CHARS = 256 * 1024;

function duration(record: ExecRecord): string {
  if (!record.ended_at) return "running";
  const ms = Date.parse(record.ended_at) - Date.parse(record.started_at);
  return ms < 1000 ? `${ms} ms` : `${(ms / 1000).toFixed(1)} s`;
}

/** The last 20 execs, read again whenever `changed` moves (an `exec.*` event arrived). */
export function ExecHistory(props: { path: string; changed: number }) {
  const execs = useLoad<ExecRecord[]>(`${props.path}/execs?limit=20`);
  const [shown, setShown] = useState<string | null>(null);
  useEffect(() => {
    if (props.changed) void execs.reload();
  }, [props.changed]);
  return (
    <section aria-labelledby="execs-title" class="panel">
      <h2 id="execs-title">Exec history</h2>
      <Problem message={execs.error} />
      <Table label="Commands" columns={["Command", "Status", "Exit", "Started", "Took", "Output"]}>
        {(execs.data ?? []).map((record) => (
          <tr key={record.exec_id} data-testid="exec-row" data-exec-id={record.exec_id}>
            <td class="clip">
              <code>{[record.command, ...(record.args ?? [])].join(" ")}</code>
              {record.background && <span class="muted"> (background)</span>}
            </td>
            <td>{record.status}</td>
            <td>{record.exit_code ?? "—"}</td>
            <td>{relative(record.started_at)}</td>
            <td>{duration(record)}</td>
            <td>
              <button
                type="button"
                class="link"
                aria-expanded={shown === record.exec_id}
                aria-label={`${bytes(record.stdout_bytes + record.stderr_bytes)} of output from ${record.exec_id}`}
                onClick={() => setShown(shown === record.exec_id ? null : record.exec_id)}
              >
                {bytes(record.stdout_bytes + record.stderr_bytes)}
              </button>
            </td>
          </tr>
        ))}
      </Table>
      {execs.data?.length === 0 && <p class="muted">No execs yet.</p>}
      {shown && <ExecOutput path={`${props.path}/execs/${shown}`} />}
    </section>
  );
}

/** One exec's output (stdout and stderr interleaved as they arrive), followed until it exits. */
function ExecOutput(props: { path: string }) {
  const [text, setText] = useState("");
  const [error, setError] = useState("");
  useEffect(() => {
    const stop = new AbortController();
    setText("");
    setError("");
    let buffered = "";
    let flush = 0;
    const append = (more: string) => {
      buffered += more;
      // One render per animation frame, however fast the output comes.
      if (!flush) {
        flush = requestAnimationFrame(() => {
          flush = 0;
          const chunk = buffered;
          buffered = "";
          setText((current) => (current + chunk).slice(-KEEP_CHARS));
        });
      }
    };
    void followLines<OutputLine>(
      `${props.path}/output`,
      (line) => {
        if (line.stream === "exit") append(`\n[exited with ${line.exit_code} after ${line.duration}]\n`);
        else if ("lost" in line) append(`[${line.lost} bytes of ${line.stream} no longer kept]\n`);
        else append(line.data);
      },
      stop.signal,
    ).catch((e: Error) => {
      if (e.name !== "AbortError") setError(e.message);
    });
    return () => {
      stop.abort();
      cancelAnimationFrame(flush);
    };
  }, [props.path]);
  return (
    <div>
      <Problem message={error} />
      <pre class="output" tabIndex={0} role="log" aria-label="Exec output" data-testid="exec-output">
        {text}
      </pre>
    </div>
  );
}
