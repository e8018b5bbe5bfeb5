//! The typed configuration tree (decisions §2): one struct per section, field names equal to the
//! documented key names, defaults only in `Default` impls, and `deny_unknown_fields` everywhere so
//! a misspelt key is an error, never silently ignored. Loading (defaults, YAML, `SVC_` env) lives
//! in the binary; this module is pure: [`Config::validate`] and [`Config::production_problems`]
//! report every problem with its dotted key, for both start-up and `svc config lint`.

mod auth;
mod database;
mod defaults;
#[cfg(test)]
mod documented;
mod e2b;
mod events;
mod exec;
mod limits;
mod logging;
mod pool;
mod providers;
mod secret;
mod server;
mod validate;
mod worker;

pub use auth::{jwks_url_acceptable, AuthConfig, MAX_WORKER_TOKEN_TTL};
pub use database::{DatabaseConfig, DatabaseDriver};
pub use defaults::{DefaultsConfig, SpawnOverflow};
pub use e2b::E2bConfig;
pub use events::EventsConfig;
pub use exec::ExecConfig;
pub use limits::{RateLimitConfig, RateLimitKeyBy};
pub use logging::{LogFormat, LogLevel, LoggingConfig};
pub use pool::PoolConfig;
pub use providers::{
    DockerAgentMode, DockerProviderConfig, FirecrackerProviderConfig, MockProviderConfig,
    ProvidersConfig, QemuAccel, QemuProviderConfig, KNOWN_PROVIDERS, PROVIDER_DOCKER,
    PROVIDER_FIRECRACKER, PROVIDER_MOCK, PROVIDER_QEMU,
};
pub use secret::{Secret, REDACTED};
pub use server::{ServerConfig, CORS_ANY_ORIGIN};
pub use validate::{ConfigProblem, MIN_PRODUCTION_API_KEY_CHARS};
pub use worker::{RpcConfig, RpcTlsConfig, WorkerConfig};

use serde::{Deserialize, Serialize};

/// The whole configuration. Components receive their section, never the environment.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// `server.*`.
    pub server: ServerConfig,
    /// `database.*`.
    pub database: DatabaseConfig,
    /// `providers.*`.
    pub providers: ProvidersConfig,
    /// `defaults.*`.
    pub defaults: DefaultsConfig,
    /// `auth.*`.
    pub auth: AuthConfig,
    /// `rate_limit.*`.
    pub rate_limit: RateLimitConfig,
    /// `worker.*`.
    pub worker: WorkerConfig,
    /// `events.*`.
    pub events: EventsConfig,
    /// `exec.*`.
    pub exec: ExecConfig,
    /// `pool.*`.
    pub pool: PoolConfig,
    /// `logging.*`.
    pub logging: LoggingConfig,
    /// `e2b.*`.
    pub e2b: E2bConfig,
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::duration::GoDuration;

    #[test]
    fn defaults_match_the_documented_table() {
        let c = Config::default();
        assert_eq!(c.server.host, "127.0.0.1");
        assert_eq!(c.server.port, 7423);
        assert_eq!(c.server.preview_domain, "localhost");
        assert_eq!(c.server.cors_allowed_origins, vec!["*".to_owned()]);
        assert_eq!(c.server.shutdown_timeout, GoDuration::from_secs(10));
        assert_eq!(c.server.max_body_bytes, 67_108_864);
        assert_eq!(c.server.max_upload_bytes, 0);
        assert_eq!(c.database.driver, DatabaseDriver::Sqlite);
        assert_eq!(c.database.path, "svc.db");
        assert!(c.database.dsn.is_empty());
        assert_eq!(c.providers.default, "");
        assert!(c.providers.mock.enabled);
        assert!(c.providers.docker.enabled);
        assert_eq!(c.providers.docker.socket, "");
        assert_eq!(c.providers.docker.runtime, "runc");
        assert_eq!(c.providers.docker.network_mode, "bridge");
        assert!(!c.providers.docker.read_only_rootfs);
        assert_eq!(c.providers.docker.seccomp_profile, "default");
        assert_eq!(c.providers.docker.dropped_caps, vec!["ALL".to_owned()]);
        assert!(c.providers.docker.added_caps.is_empty());
        assert_eq!(c.providers.docker.pids_limit, 256);
        assert_eq!(c.providers.docker.user, "");
        assert!(!c.providers.firecracker.enabled);
        assert_eq!(
            c.providers.firecracker.firecracker_path,
            PathBuf::from("firecracker")
        );
        assert_eq!(c.providers.firecracker.kernel_path, PathBuf::new());
        assert_eq!(c.providers.firecracker.data_dir, PathBuf::new());
        assert_eq!(c.defaults.image, "alpine:latest");
        assert_eq!(c.defaults.ttl.to_string(), "30m0s");
        assert_eq!(c.defaults.memory_mb, 512);
        assert_eq!(c.defaults.vcpus, 1);
        assert_eq!(c.defaults.max_ttl.to_string(), "24h0m0s");
        assert_eq!(c.defaults.default_exec_timeout, GoDuration::from_secs(60));
        assert_eq!(c.defaults.max_exec_timeout.to_string(), "10m0s");
        assert_eq!(c.defaults.max_sandboxes, 0);
        assert_eq!(c.defaults.max_sandboxes_per_owner, 0);
        assert_eq!(c.defaults.spawn_overflow, SpawnOverflow::Reject);
        assert_eq!(c.defaults.spawn_queue_timeout, GoDuration::from_secs(30));
        assert_eq!(c.defaults.max_spawn_queue, 100);
        assert_eq!(c.defaults.reap_interval, GoDuration::from_secs(10));
        assert_eq!(c.defaults.destroyed_retention.to_string(), "24h0m0s");
        assert!(!c.auth.enabled);
        assert!(c.auth.api_key.is_empty());
        assert!(c.auth.admin_api_key.is_empty());
        assert!(c.auth.admin_fallback_enabled);
        assert!(c.auth.worker_token.is_empty());
        assert!(c.auth.worker_tokens.is_empty());
        assert!(c.auth.worker_signing_key.is_empty());
        assert_eq!(c.auth.worker_token_ttl.to_string(), "15m0s");
        assert!(c.auth.worker_revoked_token_ids.is_empty());
        assert_eq!(c.auth.oidc_issuer, "");
        assert_eq!(c.auth.oidc_clock_skew.to_string(), "1m0s");
        assert_eq!(c.auth.oidc_groups_claim, "groups");
        assert_eq!(c.auth.oidc_tenant_claim, "tenant_id");
        assert!(c.auth.oidc_admin_groups.is_empty());
        assert!(c.auth.oidc_tenant_admin_groups.is_empty());
        assert!(!c.rate_limit.enabled);
        assert_eq!(c.rate_limit.requests_per_minute, 120);
        assert_eq!(c.rate_limit.burst, 60);
        assert_eq!(c.rate_limit.key_by, RateLimitKeyBy::Owner);
        assert_eq!(c.rate_limit.bucket_ttl.to_string(), "15m0s");
        assert_eq!(c.rate_limit.cleanup_interval.to_string(), "1m0s");
        assert_eq!(c.worker.id, "local");
        assert_eq!(c.worker.heartbeat_interval, GoDuration::from_secs(30));
        assert_eq!(c.worker.stale_after, GoDuration::from_secs(90));
        assert_eq!(c.worker.lease_ttl, GoDuration::from_secs(60));
        assert!(!c.worker.rpc_tls.enabled);
        assert_eq!(c.worker.rpc_tls.server_name, "");
        assert_eq!(c.events.history_size, 1000);
        assert_eq!(c.events.subscriber_buffer, 10_000);
        assert_eq!(c.exec.output_buffer_bytes, 8_388_608);
        assert!(!c.pool.enabled);
        assert_eq!(c.pool.provider, "");
        assert_eq!(c.pool.image, "alpine:latest");
        assert_eq!(c.pool.max_vms, 10);
        assert_eq!(c.pool.max_users_per_vm, 5);
        assert_eq!(c.pool.memory_mb, 2048);
        assert_eq!(c.pool.vcpus, 2);
        assert_eq!(c.pool.overflow, SpawnOverflow::Reject);
        assert_eq!(c.logging.level, LogLevel::Info);
        assert_eq!(c.logging.format, LogFormat::Pretty);
        assert!(c.validate().is_empty(), "{:?}", c.validate());
    }

    #[test]
    fn default_config_serializes_every_section_with_wire_names() {
        let value = serde_json::to_value(Config::default()).unwrap();
        let sections: Vec<&str> = value
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        for section in [
            "server",
            "database",
            "providers",
            "defaults",
            "auth",
            "rate_limit",
            "worker",
            "events",
            "pool",
            "logging",
        ] {
            assert!(sections.contains(&section), "missing section {section}");
        }
        assert_eq!(value["defaults"]["ttl"], "30m0s");
        assert_eq!(value["rate_limit"]["key_by"], "owner");
        assert_eq!(value["auth"]["api_key"], "");
        assert_eq!(value["auth"]["worker_tokens"], serde_json::json!({}));
        assert_eq!(value["worker"]["rpc_tls"]["enabled"], false);
        assert_eq!(value["providers"]["firecracker"]["kernel_path"], "");
        let back: Config = serde_json::from_value(value).unwrap();
        assert_eq!(back, Config::default());
    }

    #[test]
    fn enums_use_their_wire_names() {
        assert_eq!(DatabaseDriver::Postgres.as_str(), "postgres");
        assert_eq!(SpawnOverflow::Queue.as_str(), "queue");
        assert_eq!(RateLimitKeyBy::ApiKey.as_str(), "api_key");
        assert_eq!(RateLimitKeyBy::Ip.to_string(), "ip");
        assert_eq!(LogLevel::Warn.as_str(), "warn");
        assert_eq!(LogFormat::Json.as_str(), "json");
        for key_by in [
            RateLimitKeyBy::Owner,
            RateLimitKeyBy::ApiKey,
            RateLimitKeyBy::Ip,
        ] {
            let wire = serde_json::to_value(key_by).unwrap();
            assert_eq!(wire, key_by.as_str());
        }
        assert!(serde_json::from_str::<LogLevel>("\"trace\"").is_err());
        assert!(serde_json::from_str::<SpawnOverflow>("\"Queue\"").is_err());
    }

    #[test]
    fn parses_yaml() {
        let yaml = r#"
server:
  port: 8080
  cors_allowed_origins: ["https://app.example.com"]
  shutdown_timeout: 1m30s
database:
  driver: postgres
  dsn: postgres://svc:pw@db/svc
providers:
  default: docker
  docker:
    dropped_caps: [ALL, NET_RAW]
    pids_limit: 512
  firecracker:
    kernel_path: /var/lib/svc/vmlinux
defaults:
  spawn_overflow: queue
  ttl: 1h
auth:
  enabled: true
  api_key: k1
  worker_tokens:
    w1: t1
  oidc_admin_groups: [ops]
rate_limit:
  key_by: api_key
worker:
  rpc_tls:
    enabled: true
    server_name: svc.internal
pool:
  memory_mb: 4096
  overflow: queue
logging:
  level: debug
  format: json
"#;
        let c: Config = serde_norway::from_str(yaml).unwrap();
        assert_eq!(c.server.port, 8080);
        assert_eq!(c.server.host, "127.0.0.1");
        assert_eq!(
            c.server.cors_allowed_origins,
            vec!["https://app.example.com"]
        );
        assert_eq!(c.server.shutdown_timeout, GoDuration::from_secs(90));
        assert_eq!(c.database.driver, DatabaseDriver::Postgres);
        assert_eq!(c.database.dsn.expose(), "postgres://svc:pw@db/svc");
        assert_eq!(c.providers.default, "docker");
        assert_eq!(c.providers.docker.dropped_caps, vec!["ALL", "NET_RAW"]);
        assert_eq!(c.providers.docker.pids_limit, 512);
        assert_eq!(c.providers.docker.runtime, "runc");
        assert_eq!(
            c.providers.firecracker.kernel_path,
            PathBuf::from("/var/lib/svc/vmlinux")
        );
        assert_eq!(c.defaults.spawn_overflow, SpawnOverflow::Queue);
        assert_eq!(c.defaults.ttl, GoDuration::from_secs(3600));
        assert!(c.auth.enabled);
        assert_eq!(c.auth.api_key.expose(), "k1");
        assert_eq!(c.auth.worker_tokens["w1"].expose(), "t1");
        assert_eq!(c.auth.oidc_admin_groups, vec!["ops"]);
        assert_eq!(c.rate_limit.key_by, RateLimitKeyBy::ApiKey);
        assert!(c.worker.rpc_tls.enabled);
        assert_eq!(c.worker.rpc_tls.server_name, "svc.internal");
        assert_eq!(c.pool.memory_mb, 4096);
        assert_eq!(c.pool.overflow, SpawnOverflow::Queue);
        assert_eq!(c.logging.level, LogLevel::Debug);
        assert_eq!(c.logging.format, LogFormat::Json);
    }

    #[test]
    fn unknown_keys_are_rejected_with_their_name() {
        let cases = [
            ("server:\n  prot: 80\n", "prot"),
            ("servr:\n  port: 80\n", "servr"),
            (
                "providers:\n  docker:\n    dropped_cap: [ALL]\n",
                "dropped_cap",
            ),
            ("worker:\n  rpc_tls:\n    cert_file: x\n", "cert_file"),
        ];
        for (yaml, key) in cases {
            let err = serde_norway::from_str::<Config>(yaml).unwrap_err();
            assert!(err.to_string().contains(key), "{yaml:?}: {err}");
        }
    }

    #[test]
    fn wrong_types_are_rejected() {
        for yaml in [
            "server:\n  port: 70000\n",
            "server:\n  port: eighty\n",
            "defaults:\n  ttl: 5\n",
            "defaults:\n  ttl: -5m\n",
            "defaults:\n  spawn_overflow: wait\n",
            "auth:\n  enabled: maybe\n",
            "logging:\n  level: trace\n",
        ] {
            assert!(serde_norway::from_str::<Config>(yaml).is_err(), "{yaml:?}");
        }
    }

    #[test]
    fn debug_and_serialize_redact_secrets() {
        let mut c = Config::default();
        c.auth.api_key = Secret::new("api-key-value");
        c.auth
            .worker_tokens
            .insert("w1".to_owned(), Secret::new("worker-token-value"));
        c.database.dsn = Secret::new("postgres://u:db-password@h/d");
        let debug = format!("{c:?}");
        let json = serde_json::to_string(&c).unwrap();
        for rendered in [&debug, &json] {
            assert!(!rendered.contains("api-key-value"));
            assert!(!rendered.contains("worker-token-value"));
            assert!(!rendered.contains("db-password"));
            assert!(rendered.contains(REDACTED));
        }
    }
}
