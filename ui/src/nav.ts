// Moving between pages without a reload.

/** Moves to `href` (under /ui) and lets the app render it. */
export function navigate(href: string): void {
  history.pushState(null, "", href);
  dispatchEvent(new PopStateEvent("popstate"));
}
