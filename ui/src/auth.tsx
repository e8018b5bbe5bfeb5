// The credential prompt: an API key or a bearer token, kept for this browser session only.
import { useState } from "preact/hooks";
import { checkAccess, saveCredential, type Credential } from "./api";
import { Problem } from "./components";

export function AuthForm(props: { onAccepted: () => void }) {
  const [kind, setKind] = useState<Credential["kind"]>("api-key");
  const [value, setValue] = useState("");
  const [error, setError] = useState("");
  const submit = async (event: Event) => {
    event.preventDefault();
    saveCredential({ kind, value: value.trim() });
    if (await checkAccess()) {
      props.onAccepted();
    } else {
      saveCredential(null);
      setError("The server refused this credential.");
    }
  };
  return (
    <form class="auth" data-testid="auth-form" onSubmit={submit}>
      <h1>Sign in to svc</h1>
      <fieldset>
        <legend>Credential</legend>
        <label>
          <input
            type="radio"
            name="kind"
            checked={kind === "api-key"}
            onChange={() => setKind("api-key")}
          />
          API key
        </label>
        <label>
          <input
            type="radio"
            name="kind"
            checked={kind === "bearer"}
            onChange={() => setKind("bearer")}
          />
          Bearer token
        </label>
      </fieldset>
      <label>
        {kind === "api-key" ? "API key" : "Token"}
        <input
          type="password"
          name="credential"
          autocomplete="off"
          required
          value={value}
          onInput={(event) => setValue((event.target as HTMLInputElement).value)}
        />
      </label>
      <Problem message={error} />
      <button type="submit">Sign in</button>
    </form>
  );
}
