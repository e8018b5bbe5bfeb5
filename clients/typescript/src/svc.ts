// `Svc`: one client object for everything that is not a single sandbox.
import { SvcClient, type ConnectionOptions } from "./client.js";
import { EventStream, type EventsOptions } from "./events.js";
import { Quotas } from "./quotas.js";
import { Sandbox, type SandboxCreateOptions, type SandboxListOptions } from "./sandbox.js";
import { Templates } from "./templates.js";
import type { Admission, HealthBody, ProviderDetail, ProviderSummary, ReadyBody, SandboxInfo, StatusBody } from "./types.js";

export class Svc {
  readonly client: SvcClient;
  readonly templates: Templates;
  readonly quotas: Quotas;

  constructor(options: ConnectionOptions = {}) {
    this.client = SvcClient.from(options);
    this.templates = new Templates({ client: this.client });
    this.quotas = new Quotas({ client: this.client });
  }

  createSandbox(options: Omit<SandboxCreateOptions, keyof ConnectionOptions> = {}): Promise<Sandbox> {
    return Sandbox.create({ ...options, client: this.client });
  }

  connectSandbox(id: string): Promise<Sandbox> {
    return Sandbox.connect(id, { client: this.client });
  }

  getSandbox(id: string): Promise<SandboxInfo> {
    return Sandbox.get(id, { client: this.client });
  }

  destroySandbox(id: string): Promise<StatusBody> {
    return Sandbox.destroy(id, { client: this.client });
  }

  extendSandbox(id: string, ttl: string | number): Promise<SandboxInfo> {
    return Sandbox.extend(id, ttl, { client: this.client });
  }

  prune(): Promise<number> {
    return Sandbox.prune({ client: this.client });
  }

  admission(options: Omit<SandboxCreateOptions, keyof ConnectionOptions> = {}): Promise<Admission> {
    return Sandbox.admission({ ...options, client: this.client });
  }

  listSandboxes(options: Omit<SandboxListOptions, keyof ConnectionOptions> = {}): Promise<SandboxInfo[]> {
    return Sandbox.list({ ...options, client: this.client });
  }

  /** Subscribes to events; resolves once the server has registered the subscription. */
  events(options: Omit<EventsOptions, keyof ConnectionOptions> = {}): Promise<EventStream> {
    return EventStream.open({ ...options, client: this.client });
  }

  health(): Promise<HealthBody> {
    return this.client.json("health");
  }

  /** Readiness; UnavailableError (503) when no provider is healthy. */
  ready(): Promise<ReadyBody> {
    return this.client.json("ready");
  }

  providers(): Promise<ProviderSummary[]> {
    return this.client.json("providersList");
  }

  provider(name: string): Promise<ProviderDetail> {
    return this.client.json("providerGet", { params: { name } });
  }
}
