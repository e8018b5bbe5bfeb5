// Small pieces the pages share: a refusal, a stream's status, a sparkline, a link inside the
// console.
import uPlot from "uplot";
import "uplot/dist/uPlot.min.css";
import type { ComponentChildren } from "preact";
import { useEffect, useRef } from "preact/hooks";
import type { StreamStatus } from "./api";
import { navigate } from "./nav";

/** A refusal or failure, announced to screen readers. */
export function Problem(props: { message: string }) {
  if (!props.message) return null;
  return (
    <p class="error" role="alert">
      {props.message}
    </p>
  );
}

/** "live" once the event stream is subscribed, else what it waits for. */
export function LiveStatus(props: { status: StreamStatus }) {
  const live = props.status === "live";
  return (
    <span role="status" class={live ? "live" : "muted"} title="The event stream">
      {live ? "live" : props.status}
    </span>
  );
}

/** A link to another page of the console, followed without a reload. */
export function PageLink(props: { href: string; children: ComponentChildren; label?: string; current?: boolean }) {
  return (
    <a
      href={props.href}
      aria-label={props.label}
      aria-current={props.current ? "page" : undefined}
      onClick={(event) => {
        if (event.ctrlKey || event.metaKey || event.shiftKey) return;
        event.preventDefault();
        navigate(props.href);
      }}
    >
      {props.children}
    </a>
  );
}

/**
 * A table with a header row of `columns`, scrolling sideways when it is wider than the screen.
 * The scrolling region is a named tab stop, so a keyboard can scroll it whether or not its rows
 * hold anything focusable yet (axe: scrollable-region-focusable).
 */
export function Table(props: { label: string; columns: string[]; children: ComponentChildren }) {
  return (
    <div class="scroll" role="region" aria-label={`${props.label} table`} tabIndex={0}>
      <table>
        <thead>
          <tr>
            {props.columns.map((column) => (
              <th key={column} scope="col">
                {column}
              </th>
            ))}
          </tr>
        </thead>
        <tbody>{props.children}</tbody>
      </table>
    </div>
  );
}

/** A small line chart of `values` (oldest first), labelled with its newest value. */
export function Sparkline(props: { label: string; values: number[]; format: (value: number) => string }) {
  const host = useRef<HTMLDivElement>(null);
  const chart = useRef<uPlot | null>(null);
  const data = (): uPlot.AlignedData => [props.values.map((_, i) => i), props.values];
  useEffect(() => {
    if (!host.current) return;
    chart.current = new uPlot(
      {
        width: 180,
        height: 44,
        legend: { show: false },
        cursor: { show: false },
        scales: { x: { time: false }, y: { range: (_u, min, max) => [Math.min(0, min), Math.max(max, 1e-9)] } },
        axes: [{ show: false }, { show: false }],
        series: [{}, { stroke: "#0969da", width: 1.5, fill: "rgba(9, 105, 218, 0.12)" }],
      },
      data(),
      host.current,
    );
    return () => chart.current?.destroy();
  }, []);
  useEffect(() => {
    chart.current?.setData(data());
  }, [props.values]);
  const newest = props.values[props.values.length - 1];
  const text = newest === undefined ? "no samples yet" : props.format(newest);
  return (
    <figure class="sparkline">
      <div ref={host} role="img" aria-label={`${props.label}: ${text}`} />
      <figcaption>
        {props.label} <strong>{text}</strong>
      </figcaption>
    </figure>
  );
}

/** `1.5 MiB` of a byte count. */
export function bytes(count: number): string {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = count;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${value.toFixed(unit === 0 ? 0 : 1)} ${units[unit]}`;
}
