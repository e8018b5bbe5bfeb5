// Owner quotas (`/quotas`).
import { SvcClient, toDuration, type ConnectionOptions } from "./client.js";
import type { OwnerQuota, OwnerUsage, QuotaRequest, QuotaSummary, StatusBody } from "./types.js";

/** A quota to save: durations as strings (`1h`) or seconds; `0` inherits the global value. */
export interface QuotaInput {
  max_sandboxes?: number;
  max_ttl?: string | number;
  max_exec_timeout?: string | number;
}

export class Quotas {
  readonly client: SvcClient;

  constructor(options: ConnectionOptions = {}) {
    this.client = SvcClient.from(options);
  }

  /** Every stored owner quota. */
  async list(): Promise<OwnerQuota[]> {
    return this.client.listAll("quotaList");
  }

  /** Counts only. */
  async summary(): Promise<QuotaSummary> {
    return this.client.json("quotaSummary");
  }

  /** An owner's quota; NotFoundError when it has none. */
  async get(ownerId: string): Promise<OwnerQuota> {
    return this.client.json("quotaGet", { params: { ownerID: ownerId } });
  }

  /** Saves an owner's quota. */
  async set(ownerId: string, quota: QuotaInput): Promise<OwnerQuota> {
    const body: QuotaRequest = {};
    if (quota.max_sandboxes !== undefined) body.max_sandboxes = quota.max_sandboxes;
    if (quota.max_ttl !== undefined) body.max_ttl = toDuration(quota.max_ttl);
    if (quota.max_exec_timeout !== undefined) body.max_exec_timeout = toDuration(quota.max_exec_timeout);
    return this.client.json("quotaSet", { params: { ownerID: ownerId }, body });
  }

  /** Deletes an owner's quota. */
  async delete(ownerId: string): Promise<StatusBody> {
    return this.client.json("quotaDelete", { params: { ownerID: ownerId } });
  }

  /** What the owner holds and the limits in force for it (answers without a stored quota too). */
  async usage(ownerId: string): Promise<OwnerUsage> {
    return this.client.json("quotaUsage", { params: { ownerID: ownerId } });
  }
}
