// A terminal into a sandbox: xterm.js (its DOM renderer, so the text is on the page) over the
// interactive exec WebSocket, with the credential offered as a subprotocol (a browser's
// WebSocket cannot send headers) and the terminal's size sent on every resize.
import { FitAddon } from "@xterm/addon-fit";
import { Terminal } from "@xterm/xterm";
import "@xterm/xterm/css/xterm.css";
import { useEffect, useRef, useState } from "preact/hooks";
import { savedCredential } from "./api";

/** `svc`, and the credential as `svc.api-key.<base64url>` or `svc.bearer.<base64url>`. */
function protocols(): string[] {
  const credential = savedCredential();
  if (!credential) return ["svc"];
  const bytes = new TextEncoder().encode(credential.value);
  const encoded = btoa(String.fromCharCode(...bytes))
    .replace(/\+/g, "-")
    .replace(/\//g, "_")
    .replace(/=+$/, "");
  return ["svc", `svc.${credential.kind}.${encoded}`];
}

export function TerminalPanel(props: { id: string }) {
  const host = useRef<HTMLDivElement>(null);
  const [status, setStatus] = useState("connecting");
  const [session, setSession] = useState(0);
  useEffect(() => {
    if (!host.current) return;
    const terminal = new Terminal({ convertEol: false, cursorBlink: true, fontSize: 14 });
    const fit = new FitAddon();
    terminal.loadAddon(fit);
    // Shift+Tab is left to the browser, so keyboard users can leave the terminal (Tab itself
    // belongs to the shell's completion).
    terminal.attachCustomKeyEventHandler((event) => !(event.key === "Tab" && event.shiftKey));
    terminal.open(host.current);
    fit.fit();
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    const socket = new WebSocket(
      `${scheme}://${location.host}/api/v1/sandboxes/${props.id}/exec/ws`,
      protocols(),
    );
    const send = (message: object) => {
      if (socket.readyState === WebSocket.OPEN) socket.send(JSON.stringify(message));
    };
    socket.onopen = () => {
      setStatus("connected");
      send({ type: "start", command: "sh -l || sh", tty: true, cols: terminal.cols, rows: terminal.rows });
      terminal.focus();
    };
    socket.onmessage = (event) => {
      const message = JSON.parse(event.data as string) as {
        type: string;
        data?: string;
        exit_code?: number;
        message?: string;
      };
      if (message.type === "stdout" || message.type === "stderr") terminal.write(message.data ?? "");
      if (message.type === "exit") setStatus(`exited with ${message.exit_code}`);
      if (message.type === "error") setStatus(`error: ${message.message}`);
    };
    socket.onclose = () => setStatus((current) => (current === "connected" ? "closed" : current));
    socket.onerror = () => setStatus("could not connect");
    const input = terminal.onData((data) => send({ type: "stdin", data }));
    const resized = terminal.onResize(({ cols, rows }) => send({ type: "resize", cols, rows }));
    const observer = new ResizeObserver(() => fit.fit());
    observer.observe(host.current);
    return () => {
      observer.disconnect();
      input.dispose();
      resized.dispose();
      socket.close();
      terminal.dispose();
    };
  }, [props.id, session]);
  return (
    <section aria-labelledby="terminal-title" class="terminal">
      <div class="toolbar">
        <h2 id="terminal-title">Terminal</h2>
        <span role="status">{status}</span>
        <button type="button" class="secondary" onClick={() => setSession((n) => n + 1)}>
          New session
        </button>
      </div>
      <div data-testid="terminal" ref={host} class="terminal-screen" />
      <p class="muted hint">Shift+Tab leaves the terminal.</p>
    </section>
  );
}
