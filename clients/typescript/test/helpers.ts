// Test support: starts `$SVC_BIN serve` in a temp dir on a free port, waits for /health with a
// deadline, stops it with SIGTERM; runs suites on the mock provider and on docker.
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, openSync, readFileSync, rmSync } from "node:fs";
import http from "node:http";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { after, before, describe, it } from "node:test";
import { Sandbox, type SandboxCreateOptions } from "svc-sdk";

const packageRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..");

export const SVC_BIN = path.resolve(packageRoot, process.env.SVC_BIN || "../../target/debug/svc");
export const REQUIRE_DOCKER = process.env.SVC_TEST_REQUIRE_DOCKER === "1";
export const DOCKER_IMAGE = "svc-test-busybox:latest";
export type ProviderName = "mock" | "docker";
export const PROVIDERS: ProviderName[] = ["mock", "docker"];

export interface TestServer {
  url: string;
  dir: string;
  /** Why docker cases cannot run here, or undefined when they can. */
  dockerUnavailable: string | undefined;
  log(): string;
  stop(): Promise<void>;
}

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      const port = typeof address === "object" && address ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

/** Does a Docker engine answer on its Unix socket? */
async function dockerAnswers(): Promise<string | undefined> {
  const host = process.env.DOCKER_HOST;
  const socketPath = host?.startsWith("unix://") ? host.slice("unix://".length) : "/var/run/docker.sock";
  if (host && !host.startsWith("unix://")) return undefined; // a TCP engine: let the server decide
  return new Promise((resolve) => {
    const request = http.get({ socketPath, path: "/_ping", timeout: 2000 }, (response) => {
      response.resume();
      resolve(response.statusCode === 200 ? undefined : `Docker at ${socketPath} answered ${response.statusCode}`);
    });
    request.on("timeout", () => request.destroy(new Error("timeout")));
    request.on("error", (err) => resolve(`no Docker engine answers at ${socketPath} (${err.message})`));
  });
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Polls `check` until it answers a value other than undefined, or fails after `timeoutMs`. */
export async function waitFor<T>(what: string, check: () => Promise<T | undefined> | T | undefined, timeoutMs = 10_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const value = await check();
      if (value !== undefined) return value;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs}ms waiting for ${what}${last ? `: ${String(last)}` : ""}`);
    await sleep(50);
  }
}

/** Server processes of this test process and the stop functions of the started servers. */
const running = new Set<ChildProcess>();
const started = new Set<TestServer>();
const tempDirs = new Set<string>();
process.once("exit", () => {
  running.forEach((child) => child.kill("SIGTERM"));
  tempDirs.forEach((dir) => rmSync(dir, { recursive: true, force: true }));
});
for (const signal of ["SIGINT", "SIGTERM"] as const) {
  process.once(signal, () => {
    // Destroy what the servers hold (docker containers outlive them), then leave.
    const cleanup = Promise.allSettled([...started].map((server) => server.stop()));
    void Promise.race([cleanup, sleep(8000)]).then(() => process.exit(130));
  });
}

/** Starts a server. `mockOnly` disables docker; `env` adds configuration. */
export async function startServer(options: { mockOnly?: boolean; env?: Record<string, string> } = {}): Promise<TestServer> {
  const dir = mkdtempSync(path.join(os.tmpdir(), "svc-sdk-test-"));
  tempDirs.add(dir);
  let dockerUnavailable = options.mockOnly ? "this server runs mock only" : await dockerAnswers();
  const env: Record<string, string | undefined> = {};
  for (const [key, value] of Object.entries(process.env)) {
    if (!key.startsWith("SVC_") || ["SVC_BIN", "SVC_TEST_REQUIRE_DOCKER"].includes(key)) env[key] = value;
  }
  for (let attempt = 0; ; attempt++) {
    const port = await freePort();
    const serverEnv: Record<string, string | undefined> = {
      ...env,
      SVC_SERVER__PORT: String(port),
      // Its own egress proxy port: servers of other suites run at the same time.
      SVC_PROVIDERS__DOCKER__EGRESS_PROXY_PORT: String(await freePort()),
      SVC_PROVIDERS__MOCK__ROOT_DIR: path.join(dir, "mock"),
      ...(dockerUnavailable ? { SVC_PROVIDERS__DOCKER__ENABLED: "false" } : {}),
      ...(options.env ?? {}),
    };
    const logPath = path.join(dir, `server-${port}.log`);
    const logFd = openSync(logPath, "w");
    const child: ChildProcess = spawn(SVC_BIN, ["serve"], { cwd: dir, env: serverEnv, stdio: ["ignore", logFd, logFd] });
    const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
    running.add(child);
    child.once("exit", () => running.delete(child));
    child.once("error", () => undefined);
    const url = `http://127.0.0.1:${port}`;
    const log = () => readFileSync(logPath, "utf8");
    let ready = false;
    const deadline = Date.now() + 30_000;
    while (Date.now() < deadline && child.exitCode === null && child.signalCode === null) {
      try {
        const response = await fetch(`${url}/api/v1/health`);
        if (response.ok) {
          ready = true;
          break;
        }
      } catch {
        // not listening yet
      }
      await sleep(50);
    }
    // The answer must come from our process, not another server that held the port.
    await sleep(100);
    if (ready && child.exitCode === null && child.signalCode === null) {
      const server: TestServer = {
        url,
        dir,
        dockerUnavailable,
        log,
        async stop() {
          // Destroy whatever a failed test left (docker containers outlive the server).
          try {
            for (const info of await Sandbox.list({ url, apiKey: options.env?.SVC_AUTH__API_KEY })) {
              await Sandbox.destroy(info.id, { url, apiKey: options.env?.SVC_AUTH__API_KEY }).catch(() => undefined);
            }
          } catch {
            // the server may be gone already
          }
          child.kill("SIGTERM");
          const timer = setTimeout(() => child.kill("SIGKILL"), 15_000);
          await exited;
          clearTimeout(timer);
          started.delete(server);
          rmSync(dir, { recursive: true, force: true });
          tempDirs.delete(dir);
        },
      };
      started.add(server);
      if (!dockerUnavailable) {
        try {
          const apiKey = options.env?.SVC_AUTH__API_KEY;
          const response = await fetch(`${url}/api/v1/providers`, { headers: apiKey ? { "X-API-Key": apiKey } : {} });
          const providers = (await response.json()) as { name: string; healthy: boolean; error?: string }[];
          const docker = providers.find((p) => p.name === "docker");
          if (!docker) dockerUnavailable = "the server did not enable the docker provider";
          else if (!docker.healthy) dockerUnavailable = `the docker provider is unhealthy: ${docker.error ?? "?"}`;
          server.dockerUnavailable = dockerUnavailable;
        } catch (err) {
          await server.stop();
          throw err;
        }
      }
      return server;
    }
    child.kill("SIGKILL");
    await exited;
    if (attempt >= 2) {
      throw new Error(`${SVC_BIN} serve did not answer /api/v1/health within 30s; log:\n${log().slice(-4000)}`);
    }
  }
}

/** Spawn options for a provider under test. */
export function spawnOptions(provider: ProviderName, extra: SandboxCreateOptions = {}): SandboxCreateOptions {
  return provider === "docker" ? { provider: "docker", image: DOCKER_IMAGE, ...extra } : { provider: "mock", ...extra };
}

const warned = new Set<string>();

/**
 * Declares a suite per provider (of `providers`, default both). Docker suites skip loudly when
 * Docker does not answer, or fail when SVC_TEST_REQUIRE_DOCKER=1.
 */
export function eachProvider(
  server: TestServer,
  name: string,
  body: (provider: ProviderName) => void,
  providers: ProviderName[] = PROVIDERS,
): void {
  for (const provider of providers) {
    const reason = provider === "docker" ? server.dockerUnavailable : undefined;
    if (reason && !REQUIRE_DOCKER) {
      if (!warned.has(reason)) {
        warned.add(reason);
        process.stderr.write(`\n*** SKIPPING DOCKER TESTS: ${reason} (set SVC_TEST_REQUIRE_DOCKER=1 to fail instead) ***\n\n`);
      }
      describe(`${name} [docker]`, () => {
        it(`every ${name} case`, { skip: `Docker unavailable: ${reason}` }, () => undefined);
      });
      continue;
    }
    describe(`${name} [${provider}]`, () => {
      if (reason) {
        before(() => {
          throw new Error(`SVC_TEST_REQUIRE_DOCKER=1 but Docker is unavailable: ${reason}`);
        });
      }
      body(provider);
    });
  }
}

/** Starts the suite's server, points SVC_URL at it, and stops it after the file's tests. */
export async function suiteServer(options: { mockOnly?: boolean } = {}): Promise<TestServer> {
  const server = await startServer(options);
  process.env.SVC_URL = server.url;
  delete process.env.SVC_API_KEY;
  delete process.env.SVC_TOKEN;
  after(() => server.stop());
  return server;
}
