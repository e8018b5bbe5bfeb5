// Templates (`/templates`).
import { SvcClient, toDuration, toEgress, type ConnectionOptions, type EgressInput } from "./client.js";
import { Sandbox } from "./sandbox.js";
import type { StatusBody, Template, TemplateSpawnRequest, TemplateSpec } from "./types.js";

/** Template fields (the server's `TemplateSpec`; `ttl` may also be seconds). */
export interface TemplateInput extends Omit<TemplateSpec, "ttl" | "name" | "egress"> {
  ttl?: string | number;
  /** What its sandboxes may connect to (see {@link EgressInput}). */
  egress?: EgressInput;
}

function specBody(input: TemplateInput, name?: string): TemplateSpec {
  const body: TemplateSpec = {};
  if (name !== undefined) body.name = name;
  if (input.image !== undefined) body.image = input.image;
  if (input.provider !== undefined) body.provider = input.provider;
  if (input.memory_mb !== undefined) body.memory_mb = input.memory_mb;
  if (input.vcpus !== undefined) body.vcpus = input.vcpus;
  if (input.metadata !== undefined) body.metadata = input.metadata;
  if (input.warm_pool !== undefined) body.warm_pool = input.warm_pool;
  if (input.egress !== undefined) body.egress = toEgress(input.egress);
  if (input.ttl !== undefined && input.ttl !== null) body.ttl = toDuration(input.ttl);
  return body;
}

export class Templates {
  readonly client: SvcClient;

  constructor(options: ConnectionOptions = {}) {
    this.client = SvcClient.from(options);
  }

  /** Creates a template; ConflictError when the name exists. */
  async create(name: string, input: TemplateInput = {}): Promise<Template> {
    return this.client.json("templateCreate", { body: specBody(input, name) });
  }

  async list(): Promise<Template[]> {
    return this.client.listAll("templateList");
  }

  async get(name: string): Promise<Template> {
    return this.client.json("templateGet", { params: { name } });
  }

  /** Replaces a template's fields. */
  async update(name: string, input: TemplateInput): Promise<Template> {
    return this.client.json("templateUpdate", { params: { name }, body: specBody(input) });
  }

  async delete(name: string): Promise<StatusBody> {
    return this.client.json("templateDelete", { params: { name } });
  }

  /** Spawns a sandbox from the template, from its warm pool when one is ready. */
  async spawn(
    name: string,
    options: { ttl?: string | number; provider?: string; env?: Record<string, string>; metadata?: Record<string, string> } = {},
  ): Promise<Sandbox> {
    const body: TemplateSpawnRequest = {};
    if (options.ttl !== undefined) body.ttl = toDuration(options.ttl);
    if (options.provider !== undefined) body.provider = options.provider;
    if (options.env !== undefined) body.env = options.env;
    if (options.metadata !== undefined) body.metadata = options.metadata;
    const info = await this.client.json("templateSpawn", { params: { name }, body });
    return new Sandbox(this.client, info);
  }
}
