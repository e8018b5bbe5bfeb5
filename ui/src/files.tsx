// A sandbox's files: one directory at a time, with download and upload into the directory
// shown (`/` at first).
import { useEffect, useState } from "preact/hooks";
import { ApiError, call, download, upload } from "./api";
import { Problem, Table } from "./components";

type FileInfo = { name: string; path: string; size: number; is_dir: boolean; mode: string };

function join(dir: string, name: string): string {
  return dir === "/" ? `/${name}` : `${dir}/${name}`;
}

function parent(dir: string): string {
  const cut = dir.lastIndexOf("/");
  return cut <= 0 ? "/" : dir.slice(0, cut);
}

export function FileBrowser(props: { id: string }) {
  const [dir, setDir] = useState("/");
  const [entries, setEntries] = useState<FileInfo[]>([]);
  const [error, setError] = useState("");
  const [status, setStatus] = useState("");
  const files = `/sandboxes/${props.id}/files`;
  const load = (path: string) =>
    call<FileInfo[]>("GET", `${files}/list?path=${encodeURIComponent(path)}`)
      .then(({ data }) => {
        setEntries(data);
        setError("");
      })
      .catch((e: ApiError) => setError(e.message));
  useEffect(() => {
    void load(dir);
  }, [props.id, dir]);

  const save = async (entry: FileInfo) => {
    try {
      const blob = await download(`${files}?path=${encodeURIComponent(entry.path)}`);
      const link = document.createElement("a");
      link.href = URL.createObjectURL(blob);
      link.download = entry.name;
      link.click();
      URL.revokeObjectURL(link.href);
    } catch (e) {
      setError((e as ApiError).message);
    }
  };

  const send = async (list: FileList | null) => {
    if (!list) return;
    for (const file of Array.from(list)) {
      const path = join(dir, file.name);
      setStatus(`uploading ${path}…`);
      try {
        await upload(`${files}?path=${encodeURIComponent(path)}`, file);
        setStatus(`uploaded ${path}`);
      } catch (e) {
        setError((e as ApiError).message);
        setStatus("");
      }
    }
    await load(dir);
  };

  return (
    <section aria-labelledby="files-title" class="files">
      <div class="toolbar">
        <h2 id="files-title">Files</h2>
        <code title="The directory shown">{dir}</code>
        <button type="button" class="secondary" aria-label="Refresh files" onClick={() => void load(dir)}>
          Refresh
        </button>
        <label>
          Upload into {dir}
          <input
            type="file"
            multiple
            data-testid="file-upload"
            onChange={(e) => void send((e.target as HTMLInputElement).files)}
          />
        </label>
      </div>
      <Problem message={error} />
      {status && <p role="status">{status}</p>}
      <Table label="Files" columns={["Name", "Size", "Mode"]}>
        {dir !== "/" && (
          <tr>
            <td colSpan={3}>
              <button type="button" class="link" onClick={() => setDir(parent(dir))}>
                ..
              </button>
            </td>
          </tr>
        )}
        {entries.map((entry) => (
          <tr key={entry.path} data-testid="file-row" data-path={entry.path}>
            <td>
              <button
                type="button"
                class="link"
                onClick={() => (entry.is_dir ? setDir(entry.path) : void save(entry))}
                aria-label={entry.is_dir ? `Open ${entry.name}/` : `Download ${entry.name}`}
              >
                {entry.is_dir ? `${entry.name}/` : entry.name}
              </button>
            </td>
            <td>{entry.is_dir ? "—" : entry.size}</td>
            <td>{entry.mode}</td>
          </tr>
        ))}
      </Table>
    </section>
  );
}
