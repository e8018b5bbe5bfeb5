// The API's shapes the console reads (a subset of the OpenAPI document's schemas).

export type Sandbox = {
  id: string;
  state: string;
  provider: string;
  image: string;
  owner_id?: string;
  tenant_id?: string;
  template?: string | null;
  created_at: string;
  expires_at: string;
  state_reason?: string | null;
  state_message?: string | null;
  memory_mb?: number;
  vcpus?: number;
};

export type Template = {
  name: string;
  image: string;
  provider: string;
  memory_mb: number;
  vcpus: number;
  ttl: string;
  warm_pool: number;
  warm_ready: number;
};

export type Provider = {
  name: string;
  healthy: boolean;
  default?: boolean;
  latency_ms?: number;
  error?: string;
  capabilities?: string[];
};

/** `2m 5s` from now (or ago) of an RFC 3339 time. */
export function relative(time: string, now = Date.now()): string {
  const seconds = Math.round((Date.parse(time) - now) / 1000);
  const size = Math.abs(seconds);
  if (size === 0) return "now";
  const text =
    size < 60
      ? `${size}s`
      : size < 3600
        ? `${Math.floor(size / 60)}m ${size % 60}s`
        : `${Math.floor(size / 3600)}h ${Math.floor((size % 3600) / 60)}m`;
  return seconds < 0 ? `${text} ago` : `in ${text}`;
}
