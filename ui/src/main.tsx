// svc's web console (decisions §21): the sandbox list, one sandbox, events, templates and an
// overview, on svc's own API with the caller's credential.
import { render } from "preact";
import { useEffect, useState } from "preact/hooks";
import { checkAccess, saveCredential, savedCredential, whenUnauthorized } from "./api";
import { AuthForm } from "./auth";
import { EventsPage } from "./events";
import { PageLink } from "./components";
import { OverviewPage } from "./overview";
import { SandboxList } from "./sandboxes";
import { SandboxPage } from "./sandbox";
import { TemplatesPage } from "./templates";
import "./style.css";

/** The page a path names, under /ui. */
function page(path: string) {
  const rest = path.replace(/^\/ui\/?/, "");
  const sandbox = /^sandboxes\/([^/]+)$/.exec(rest);
  if (sandbox?.[1]) return <SandboxPage id={decodeURIComponent(sandbox[1])} />;
  if (rest === "events") return <EventsPage />;
  if (rest === "templates") return <TemplatesPage />;
  if (rest === "overview") return <OverviewPage />;
  return <SandboxList />;
}

function App() {
  const [path, setPath] = useState(location.pathname);
  const [access, setAccess] = useState<"checking" | "granted" | "needed">("checking");
  useEffect(() => {
    const moved = () => {
      setPath(location.pathname);
      // Keyboard and screen-reader users land on the new page, not on the link they left.
      requestAnimationFrame(() => document.getElementById("content")?.focus({ preventScroll: true }));
    };
    addEventListener("popstate", moved);
    whenUnauthorized(() => setAccess("needed"));
    void checkAccess().then((ok) => setAccess(ok ? "granted" : "needed"));
    return () => removeEventListener("popstate", moved);
  }, []);
  if (access === "checking") return <p class="loading">Loading…</p>;
  if (access === "needed") {
    return <AuthForm onAccepted={() => setAccess("granted")} />;
  }
  const links: [string, string][] = [
    ["/ui", "Sandboxes"],
    ["/ui/events", "Events"],
    ["/ui/templates", "Templates"],
    ["/ui/overview", "Overview"],
  ];
  return (
    <>
      <a class="skip" href="#content">
        Skip to content
      </a>
      <header>
        <strong>svc</strong>
        <nav aria-label="Pages">
          {links.map(([href, label]) => (
            <PageLink key={href} href={href} current={path === href}>
              {label}
            </PageLink>
          ))}
        </nav>
        {savedCredential() && (
          <button
            type="button"
            class="link"
            onClick={() => {
              saveCredential(null);
              setAccess("needed");
            }}
          >
            Sign out
          </button>
        )}
      </header>
      <main id="content" tabIndex={-1}>
        {page(path)}
      </main>
    </>
  );
}

const root = document.getElementById("app");
if (root) render(<App />, root);
