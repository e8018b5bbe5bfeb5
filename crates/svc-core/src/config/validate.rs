//! Checks on a parsed [`Config`]: [`Config::validate`] finds values that are out of range or
//! inconsistent (start-up refuses them), [`Config::production_problems`] finds settings that are
//! legal but unsafe for production (decisions §16, `svc config lint --production`). Both report
//! every problem, each naming its dotted key, so one run shows everything to fix.

use std::fmt;

use serde::Serialize;

use super::auth::MAX_WORKER_TOKEN_TTL;
use super::database::DatabaseDriver;
use super::defaults::SpawnOverflow;
use super::providers::KNOWN_PROVIDERS;
use super::server::CORS_ANY_ORIGIN;
use super::worker::DEFAULT_WORKER_ID;
use super::Config;
use crate::duration::GoDuration;

/// Shortest API key accepted by the production lint.
pub const MIN_PRODUCTION_API_KEY_CHARS: usize = 32;

/// One finding about one key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ConfigProblem {
    /// Dotted key path, e.g. `server.port`.
    pub key: String,
    /// What is wrong and what is allowed (lowercase, no trailing period).
    pub message: String,
}

impl ConfigProblem {
    /// A problem with `key`.
    pub fn new(key: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigProblem {
            key: key.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for ConfigProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.key, self.message)
    }
}

/// Collects problems in the order the checks run (which follows the key table).
#[derive(Default)]
struct Problems(Vec<ConfigProblem>);

impl Problems {
    fn push(&mut self, key: impl Into<String>, message: impl Into<String>) {
        self.0.push(ConfigProblem::new(key, message));
    }

    /// Records `message` against `key` unless `ok`.
    fn check(&mut self, ok: bool, key: &str, message: impl FnOnce() -> String) {
        if !ok {
            self.push(key, message());
        }
    }

    fn at_least_one(&mut self, value: u64, key: &str) {
        self.check(value >= 1, key, || {
            format!("must be at least 1, got {value}")
        });
    }

    fn positive_duration(&mut self, value: GoDuration, key: &str) {
        self.check(!value.is_zero(), key, || {
            "must be longer than 0s".to_owned()
        });
    }

    fn non_empty(&mut self, value: &str, key: &str) {
        self.check(!value.is_empty(), key, || "must not be empty".to_owned());
    }

    /// A provider reference (`providers.default`, `pool.provider`): empty or an enabled provider.
    fn provider_reference(&mut self, config: &Config, name: &str, key: &str) {
        if name.is_empty() {
            return;
        }
        match config.providers.is_enabled(name) {
            None => self.push(
                key,
                format!(
                    "unknown provider {name:?}; allowed: empty (automatic), {}",
                    KNOWN_PROVIDERS.join(", ")
                ),
            ),
            Some(false) => self.push(
                key,
                format!("names provider {name:?}, but providers.{name}.enabled is false"),
            ),
            Some(true) => {}
        }
    }
}

/// `/sb-<16 hex>/agent.sock`: what a sandbox's agent socket adds to `agent_socket_dir`.
const AGENT_SOCKET_SUFFIX: usize = "/sb-0123456789abcdef/agent.sock".len();

impl Config {
    /// Every out-of-range or inconsistent value, each naming its key; empty when the
    /// configuration can be used. Start-up refuses a configuration with any problem.
    pub fn validate(&self) -> Vec<ConfigProblem> {
        let mut p = Problems::default();
        self.validate_server(&mut p);
        self.validate_database(&mut p);
        self.validate_providers(&mut p);
        self.validate_qemu(&mut p);
        self.validate_defaults(&mut p);
        self.validate_auth(&mut p);
        self.validate_rate_limit(&mut p);
        self.validate_worker(&mut p);
        p.at_least_one(
            u64::try_from(self.events.history_size).unwrap_or(u64::MAX),
            "events.history_size",
        );
        p.at_least_one(
            u64::try_from(self.events.subscriber_buffer).unwrap_or(u64::MAX),
            "events.subscriber_buffer",
        );
        p.at_least_one(self.exec.output_buffer_bytes, "exec.output_buffer_bytes");
        self.validate_pool(&mut p);
        if self.e2b.enabled {
            p.non_empty(&self.e2b.host, "e2b.host");
            let same = self.e2b.host == self.server.host && self.e2b.port == self.server.port;
            p.check(self.e2b.port == 0 || !same, "e2b.port", || {
                "must differ from server.port on the same host".to_owned()
            });
        }
        p.0
    }

    fn validate_server(&self, p: &mut Problems) {
        let server = &self.server;
        p.non_empty(&server.host, "server.host");
        // server.port is a u16, so its range (0 = ephemeral, up to 65535) is enforced by parsing.
        p.check(server.max_body_bytes > 0, "server.max_body_bytes", || {
            "must be greater than 0".to_owned()
        });
    }

    fn validate_database(&self, p: &mut Problems) {
        let database = &self.database;
        match database.driver {
            DatabaseDriver::Sqlite => p.check(!database.path.is_empty(), "database.path", || {
                "must not be empty when database.driver is sqlite (use :memory: for a throwaway store)"
                    .to_owned()
            }),
            DatabaseDriver::Postgres => p.check(!database.dsn.is_empty(), "database.dsn", || {
                "is required when database.driver is postgres".to_owned()
            }),
        }
    }

    fn validate_providers(&self, p: &mut Problems) {
        p.provider_reference(self, &self.providers.default, "providers.default");
        let docker = &self.providers.docker;
        if docker.enabled && docker.agent != super::DockerAgentMode::Never {
            let dir = &docker.agent_socket_dir;
            p.check(
                dir.as_os_str().is_empty() || dir.is_absolute(),
                "providers.docker.agent_socket_dir",
                || "must be an absolute path (the engine mounts it by its host path)".to_owned(),
            );
            // A Unix socket's path holds at most 107 bytes: `<dir>/sb-<16 hex>/agent.sock`.
            let longest = docker.agent_socket_root().as_os_str().len() + AGENT_SOCKET_SUFFIX;
            p.check(longest <= 107, "providers.docker.agent_socket_dir", || {
                format!(
                    "is too long: a sandbox's socket path would be {longest} bytes, Unix sockets \
                     allow 107"
                )
            });
        }
        let firecracker = &self.providers.firecracker;
        if firecracker.enabled {
            p.check(
                !firecracker.firecracker_path.as_os_str().is_empty(),
                "providers.firecracker.firecracker_path",
                || "must not be empty when the firecracker provider is enabled".to_owned(),
            );
            p.check(
                !firecracker.kernel_path.as_os_str().is_empty(),
                "providers.firecracker.kernel_path",
                || "is required when the firecracker provider is enabled".to_owned(),
            );
            p.check(
                !firecracker.agent_path.as_os_str().is_empty(),
                "providers.firecracker.agent_path",
                || "is required when the firecracker provider is enabled".to_owned(),
            );
            p.check(
                !firecracker.boot_timeout.is_zero(),
                "providers.firecracker.boot_timeout",
                || "must be longer than 0s".to_owned(),
            );
        }
    }

    fn validate_qemu(&self, p: &mut Problems) {
        let qemu = &self.providers.qemu;
        if !qemu.enabled {
            return;
        }
        for (value, key) in [
            (&qemu.qemu_path, "providers.qemu.qemu_path"),
            (&qemu.kernel_path, "providers.qemu.kernel_path"),
            (&qemu.agent_path, "providers.qemu.agent_path"),
            (
                &qemu.vsock_backend_path,
                "providers.qemu.vsock_backend_path",
            ),
        ] {
            p.check(!value.as_os_str().is_empty(), key, || {
                "is required when the qemu provider is enabled".to_owned()
            });
        }
        p.check(
            !qemu.boot_timeout.is_zero(),
            "providers.qemu.boot_timeout",
            || "must be longer than 0s".to_owned(),
        );
    }

    fn validate_defaults(&self, p: &mut Problems) {
        let defaults = &self.defaults;
        p.non_empty(&defaults.image, "defaults.image");
        p.at_least_one(defaults.memory_mb, "defaults.memory_mb");
        p.at_least_one(u64::from(defaults.vcpus), "defaults.vcpus");
        p.at_least_one(defaults.max_memory_mb, "defaults.max_memory_mb");
        p.at_least_one(u64::from(defaults.max_vcpus), "defaults.max_vcpus");
        p.check(
            defaults.memory_mb <= defaults.max_memory_mb,
            "defaults.memory_mb",
            || {
                format!(
                    "must not exceed defaults.max_memory_mb ({})",
                    defaults.max_memory_mb
                )
            },
        );
        p.check(
            defaults.vcpus <= defaults.max_vcpus,
            "defaults.vcpus",
            || {
                format!(
                    "must not exceed defaults.max_vcpus ({})",
                    defaults.max_vcpus
                )
            },
        );
        if !defaults.max_ttl.is_zero() {
            p.check(defaults.ttl <= defaults.max_ttl, "defaults.ttl", || {
                format!(
                    "{} exceeds defaults.max_ttl ({})",
                    defaults.ttl, defaults.max_ttl
                )
            });
        }
        if !defaults.max_exec_timeout.is_zero() {
            p.check(
                defaults.default_exec_timeout <= defaults.max_exec_timeout,
                "defaults.default_exec_timeout",
                || {
                    format!(
                        "{} exceeds defaults.max_exec_timeout ({})",
                        defaults.default_exec_timeout, defaults.max_exec_timeout
                    )
                },
            );
        }
        // The spawn queue also serves a full pool with `pool.overflow: queue` (decisions §15).
        let queue_used = defaults.spawn_overflow == SpawnOverflow::Queue
            || (self.pool.enabled && self.pool.overflow == SpawnOverflow::Queue);
        if queue_used {
            p.at_least_one(
                u64::try_from(defaults.max_spawn_queue).unwrap_or(u64::MAX),
                "defaults.max_spawn_queue",
            );
            p.positive_duration(defaults.spawn_queue_timeout, "defaults.spawn_queue_timeout");
        }
        p.positive_duration(defaults.reap_interval, "defaults.reap_interval");
        p.positive_duration(defaults.spawn_timeout, "defaults.spawn_timeout");
        p.at_least_one(
            u64::from(defaults.max_concurrent_builds),
            "defaults.max_concurrent_builds",
        );
        p.positive_duration(defaults.build_timeout, "defaults.build_timeout");
    }

    fn validate_auth(&self, p: &mut Problems) {
        let auth = &self.auth;
        if auth.enabled {
            p.check(
                !auth.api_key.is_empty() || !auth.admin_api_key.is_empty(),
                "auth.api_key",
                || "is required when auth.enabled is true (or set auth.admin_api_key)".to_owned(),
            );
        }
        for (worker_id, token) in &auth.worker_tokens {
            p.check(!worker_id.is_empty(), "auth.worker_tokens", || {
                "worker ID must not be empty".to_owned()
            });
            if !worker_id.is_empty() && token.is_empty() {
                p.push(
                    format!("auth.worker_tokens.{worker_id}"),
                    "token must not be empty",
                );
            }
        }
        p.positive_duration(auth.worker_token_ttl, "auth.worker_token_ttl");
        p.check(
            auth.worker_token_ttl <= MAX_WORKER_TOKEN_TTL,
            "auth.worker_token_ttl",
            || {
                format!(
                    "must be at most {MAX_WORKER_TOKEN_TTL}, got {}",
                    auth.worker_token_ttl
                )
            },
        );
        if !auth.oidc_jwks_url.is_empty() {
            p.check(
                super::jwks_url_acceptable(&auth.oidc_jwks_url),
                "auth.oidc_jwks_url",
                || {
                    format!(
                        "must be an https URL (plain http only for loopback hosts), got {:?}",
                        auth.oidc_jwks_url
                    )
                },
            );
        }
        if auth.oidc_enabled() {
            p.non_empty(&auth.oidc_groups_claim, "auth.oidc_groups_claim");
            p.non_empty(&auth.oidc_tenant_claim, "auth.oidc_tenant_claim");
        }
    }

    fn validate_rate_limit(&self, p: &mut Problems) {
        let rate_limit = &self.rate_limit;
        if rate_limit.enabled {
            p.at_least_one(
                u64::from(rate_limit.requests_per_minute),
                "rate_limit.requests_per_minute",
            );
            p.at_least_one(u64::from(rate_limit.burst), "rate_limit.burst");
            p.positive_duration(rate_limit.bucket_ttl, "rate_limit.bucket_ttl");
            p.positive_duration(rate_limit.cleanup_interval, "rate_limit.cleanup_interval");
        }
    }

    fn validate_worker(&self, p: &mut Problems) {
        let worker = &self.worker;
        p.check(
            !worker.id.is_empty()
                && !worker
                    .id
                    .chars()
                    .any(|c| c.is_whitespace() || c.is_control() || c == '/'),
            "worker.id",
            || {
                format!(
                    "must be non-empty without whitespace or '/', got {:?}",
                    worker.id
                )
            },
        );
        p.positive_duration(worker.heartbeat_interval, "worker.heartbeat_interval");
        p.positive_duration(worker.stale_after, "worker.stale_after");
        p.positive_duration(worker.lease_ttl, "worker.lease_ttl");
        // A worker heartbeating every interval must stay fresh, and the leases it renews on each
        // heartbeat must not lapse in between (decisions §11).
        if !worker.heartbeat_interval.is_zero() {
            if !worker.stale_after.is_zero() {
                p.check(
                    worker.stale_after > worker.heartbeat_interval,
                    "worker.stale_after",
                    || {
                        format!(
                            "{} must be longer than worker.heartbeat_interval ({})",
                            worker.stale_after, worker.heartbeat_interval
                        )
                    },
                );
            }
            if !worker.lease_ttl.is_zero() {
                p.check(
                    worker.lease_ttl > worker.heartbeat_interval,
                    "worker.lease_ttl",
                    || {
                        format!(
                            "{} must be longer than worker.heartbeat_interval ({})",
                            worker.lease_ttl, worker.heartbeat_interval
                        )
                    },
                );
            }
        }
        let rpc = &worker.rpc;
        if rpc.enabled {
            p.check(
                rpc.listen.parse::<std::net::SocketAddr>().is_ok(),
                "worker.rpc.listen",
                || {
                    format!(
                        "{:?} is not an address and port such as 0.0.0.0:7424",
                        rpc.listen
                    )
                },
            );
            p.check(
                worker.rpc_tls.enabled || !rpc.token.is_empty(),
                "worker.rpc.token",
                || "is required when worker.rpc.enabled is true without worker.rpc_tls".to_owned(),
            );
        }
        let advertised = &worker.advertise_url;
        p.check(
            advertised.is_empty()
                || ["http://", "https://"].iter().any(|scheme| {
                    advertised.len() > scheme.len() && advertised.starts_with(scheme)
                }),
            "worker.advertise_url",
            || format!("{advertised:?} must be an http:// or https:// URL"),
        );
        let tls = &worker.rpc_tls;
        if tls.enabled {
            let pairs = [
                (
                    &tls.server_cert_file,
                    &tls.server_key_file,
                    "server_cert_file",
                    "server_key_file",
                ),
                (
                    &tls.client_cert_file,
                    &tls.client_key_file,
                    "client_cert_file",
                    "client_key_file",
                ),
            ];
            for (cert, key, cert_name, key_name) in pairs {
                let cert_set = !cert.as_os_str().is_empty();
                let key_set = !key.as_os_str().is_empty();
                if cert_set != key_set {
                    let (missing, given) = if cert_set {
                        (key_name, cert_name)
                    } else {
                        (cert_name, key_name)
                    };
                    p.push(
                        format!("worker.rpc_tls.{missing}"),
                        format!("is required when worker.rpc_tls.{given} is set"),
                    );
                }
            }
        }
    }

    fn validate_pool(&self, p: &mut Problems) {
        let pool = &self.pool;
        p.at_least_one(u64::from(pool.max_vms), "pool.max_vms");
        p.at_least_one(u64::from(pool.max_users_per_vm), "pool.max_users_per_vm");
        if pool.enabled {
            p.non_empty(&pool.image, "pool.image");
            p.at_least_one(pool.memory_mb, "pool.memory_mb");
            p.at_least_one(u64::from(pool.vcpus), "pool.vcpus");
            p.provider_reference(self, &pool.provider, "pool.provider");
            if pool.idle_timeout.as_std().is_zero() {
                p.push("pool.idle_timeout", "must be above 0s");
            }
        }
    }

    /// Settings that are valid but unsafe in production (decisions §16); `svc config lint
    /// --production` and `svc doctor --production` report them as errors. Run it in addition to
    /// [`Config::validate`]; it does not repeat those checks.
    pub fn production_problems(&self) -> Vec<ConfigProblem> {
        let mut p = Problems::default();
        let origins = &self.server.cors_allowed_origins;
        if origins.is_empty() {
            p.push(
                "server.cors_allowed_origins",
                "must list the allowed origins in production, got an empty list",
            );
        }
        for origin in origins {
            if origin.trim() == CORS_ANY_ORIGIN {
                p.push(
                    "server.cors_allowed_origins",
                    "must not contain the * wildcard in production; list the allowed origins",
                );
            } else if !is_http_origin(origin) {
                p.push(
                    "server.cors_allowed_origins",
                    format!(
                        "{origin:?} is not an origin of the form http(s)://host[:port] (no path, no trailing slash)"
                    ),
                );
            }
        }

        let auth = &self.auth;
        p.check(auth.enabled, "auth.enabled", || {
            "must be true in production".to_owned()
        });
        for (secret, key) in [
            (&auth.api_key, "auth.api_key"),
            (&auth.admin_api_key, "auth.admin_api_key"),
        ] {
            let chars = secret.char_count();
            p.check(chars >= MIN_PRODUCTION_API_KEY_CHARS, key, || {
                format!(
                    "must be at least {MIN_PRODUCTION_API_KEY_CHARS} characters in production, got {chars}"
                )
            });
        }
        if auth.oidc_configured() {
            p.check(!auth.oidc_issuer.is_empty(), "auth.oidc_issuer", || {
                "is required in production when OIDC is configured".to_owned()
            });
            p.check(
                auth.oidc_jwks_url.starts_with("https://"),
                "auth.oidc_jwks_url",
                || {
                    if auth.oidc_jwks_url.is_empty() {
                        "an https JWKS URL is required in production when OIDC is configured"
                            .to_owned()
                    } else {
                        format!(
                            "must be an https URL in production, got {:?}",
                            auth.oidc_jwks_url
                        )
                    }
                },
            );
            p.check(!auth.oidc_audience.is_empty(), "auth.oidc_audience", || {
                "is required in production when OIDC is configured".to_owned()
            });
            p.check(
                auth.oidc_has_group_mapping(),
                "auth.oidc_admin_groups",
                || {
                    "no group maps to a role; set at least one of auth.oidc_admin_groups, \
                 oidc_operator_groups, oidc_viewer_groups, oidc_tenant_admin_groups"
                        .to_owned()
                },
            );
        }

        // Node-to-node calls carry callers' principals and sandboxes' data.
        p.check(
            !self.worker.rpc.enabled || self.worker.rpc_tls.enabled,
            "worker.rpc_tls.enabled",
            || "must be true in production when worker.rpc.enabled is true".to_owned(),
        );

        p.check(
            !self.providers.mock.enabled,
            "providers.mock.enabled",
            || {
                "must be false in production: the mock provider does not isolate sandboxes"
                    .to_owned()
            },
        );

        // SQLite in a multi-replica setup: replicas are told apart by their worker IDs and talk
        // over worker RPC, and a SQLite file cannot be shared between them.
        if self.database.driver == DatabaseDriver::Sqlite {
            let replicas = if self.worker.rpc.enabled {
                Some("worker.rpc.enabled is true".to_owned())
            } else if self.worker.rpc_tls.enabled {
                Some("worker.rpc_tls.enabled is true".to_owned())
            } else if self.worker.id != DEFAULT_WORKER_ID {
                Some(format!("worker.id is {:?}", self.worker.id))
            } else {
                None
            };
            if let Some(why) = replicas {
                p.push(
                    "database.driver",
                    format!(
                        "sqlite cannot be shared by several replicas, and {why}, which names a replica of a multi-replica setup; use postgres in production"
                    ),
                );
            }
        }
        p.0
    }
}

/// True for `http(s)://host[:port]` with nothing after it: no path, query or trailing slash.
fn is_http_origin(entry: &str) -> bool {
    let Some(authority) = entry
        .strip_prefix("https://")
        .or_else(|| entry.strip_prefix("http://"))
    else {
        return false;
    };
    let (host_ok, port) = if let Some(bracketed) = authority.strip_prefix('[') {
        let Some((ipv6, after)) = bracketed.split_once(']') else {
            return false;
        };
        let ipv6_ok = !ipv6.is_empty()
            && ipv6
                .chars()
                .all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.');
        let port = match after {
            "" => None,
            _ => match after.strip_prefix(':') {
                Some(port) => Some(port),
                None => return false,
            },
        };
        (ipv6_ok, port)
    } else {
        let (host, port) = match authority.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        };
        let host_ok = !host.is_empty()
            && host.split('.').all(|label| {
                !label.is_empty()
                    && !label.starts_with('-')
                    && !label.ends_with('-')
                    && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
            });
        (host_ok, port)
    };
    let port_ok = match port {
        None => true,
        Some(port) => {
            !port.is_empty()
                && port.chars().all(|c| c.is_ascii_digit())
                && port.parse::<u16>().is_ok_and(|n| n > 0)
        }
    };
    host_ok && port_ok
}

#[cfg(test)]
mod tests {
    use super::super::secret::Secret;
    use super::*;

    fn keys(problems: &[ConfigProblem]) -> Vec<&str> {
        problems.iter().map(|p| p.key.as_str()).collect()
    }

    fn assert_single_problem(config: &Config, key: &str) {
        let problems = config.validate();
        assert_eq!(keys(&problems), vec![key], "{problems:?}");
    }

    #[test]
    fn default_config_is_valid() {
        assert_eq!(Config::default().validate(), Vec::new());
    }

    #[test]
    fn problem_display_names_the_key() {
        let problem = ConfigProblem::new("server.port", "must be at least 1");
        assert_eq!(problem.to_string(), "server.port: must be at least 1");
    }

    #[test]
    fn out_of_range_values_name_their_key() {
        type Mutate = fn(&mut Config);
        let cases: &[(Mutate, &str)] = &[
            (|c| c.server.max_body_bytes = 0, "server.max_body_bytes"),
            (|c| c.server.host = String::new(), "server.host"),
            (|c| c.events.history_size = 0, "events.history_size"),
            (
                |c| c.events.subscriber_buffer = 0,
                "events.subscriber_buffer",
            ),
            (|c| c.defaults.memory_mb = 0, "defaults.memory_mb"),
            (|c| c.defaults.vcpus = 0, "defaults.vcpus"),
            (|c| c.defaults.image = String::new(), "defaults.image"),
            (|c| c.pool.max_vms = 0, "pool.max_vms"),
            (|c| c.pool.max_users_per_vm = 0, "pool.max_users_per_vm"),
            (
                |c| c.worker.heartbeat_interval = GoDuration::ZERO,
                "worker.heartbeat_interval",
            ),
            (
                |c| c.worker.stale_after = GoDuration::ZERO,
                "worker.stale_after",
            ),
            (
                |c| c.worker.lease_ttl = GoDuration::ZERO,
                "worker.lease_ttl",
            ),
            (
                |c| c.worker.lease_ttl = GoDuration::from_secs(30),
                "worker.lease_ttl",
            ),
            (
                |c| c.worker.stale_after = GoDuration::from_secs(20),
                "worker.stale_after",
            ),
            (|c| c.worker.id = String::new(), "worker.id"),
            (|c| c.worker.id = "a b".to_owned(), "worker.id"),
            (
                |c| c.defaults.reap_interval = GoDuration::ZERO,
                "defaults.reap_interval",
            ),
            (
                |c| c.auth.worker_token_ttl = GoDuration::ZERO,
                "auth.worker_token_ttl",
            ),
            (
                |c| c.auth.worker_token_ttl = GoDuration::from_secs(24 * 3600 + 1),
                "auth.worker_token_ttl",
            ),
            (
                |c| c.database.driver = DatabaseDriver::Postgres,
                "database.dsn",
            ),
            (|c| c.database.path = String::new(), "database.path"),
            (
                |c| c.defaults.ttl = GoDuration::from_secs(25 * 3600),
                "defaults.ttl",
            ),
            (
                |c| c.defaults.default_exec_timeout = GoDuration::from_secs(3600),
                "defaults.default_exec_timeout",
            ),
            (|c| c.auth.enabled = true, "auth.api_key"),
            (
                |c| c.providers.default = "dokcer".to_owned(),
                "providers.default",
            ),
            (
                |c| c.providers.default = "firecracker".to_owned(),
                "providers.default",
            ),
            (
                |c| c.auth.oidc_jwks_url = "example.com/jwks".to_owned(),
                "auth.oidc_jwks_url",
            ),
            (
                |c| c.auth.oidc_jwks_url = "http://idp.example.com/jwks".to_owned(),
                "auth.oidc_jwks_url",
            ),
            (
                |c| {
                    c.auth
                        .worker_tokens
                        .insert("w1".to_owned(), Secret::default());
                },
                "auth.worker_tokens.w1",
            ),
            (
                |c| {
                    c.worker.rpc_tls.enabled = true;
                    c.worker.rpc_tls.server_cert_file = "cert.pem".into();
                },
                "worker.rpc_tls.server_key_file",
            ),
            (|c| c.worker.rpc.enabled = true, "worker.rpc.token"),
            (
                |c| {
                    c.worker.rpc.enabled = true;
                    c.worker.rpc.token = Secret::new("node-token");
                    c.worker.rpc.listen = "localhost".to_owned();
                },
                "worker.rpc.listen",
            ),
            (
                |c| c.worker.advertise_url = "node-b:7424".to_owned(),
                "worker.advertise_url",
            ),
        ];
        for (mutate, key) in cases {
            let mut config = Config::default();
            mutate(&mut config);
            assert_single_problem(&config, key);
        }
    }

    #[test]
    fn conditional_checks_apply_only_when_their_feature_is_on() {
        let mut config = Config::default();
        config.rate_limit.requests_per_minute = 0;
        config.rate_limit.burst = 0;
        assert!(config.validate().is_empty());
        config.rate_limit.enabled = true;
        assert_eq!(
            keys(&config.validate()),
            vec!["rate_limit.requests_per_minute", "rate_limit.burst"]
        );

        let mut config = Config::default();
        config.defaults.max_ttl = GoDuration::ZERO;
        config.defaults.ttl = GoDuration::from_secs(1_000_000);
        config.defaults.max_exec_timeout = GoDuration::ZERO;
        config.defaults.default_exec_timeout = GoDuration::from_secs(1_000_000);
        assert!(config.validate().is_empty(), "{:?}", config.validate());

        let mut config = Config::default();
        config.defaults.max_spawn_queue = 0;
        assert!(config.validate().is_empty());
        config.defaults.spawn_overflow = SpawnOverflow::Queue;
        assert_single_problem(&config, "defaults.max_spawn_queue");

        let mut config = Config::default();
        config.providers.firecracker.enabled = true;
        config.providers.firecracker.boot_timeout = crate::GoDuration::ZERO;
        assert_eq!(
            keys(&config.validate()),
            vec![
                "providers.firecracker.kernel_path",
                "providers.firecracker.agent_path",
                "providers.firecracker.boot_timeout"
            ]
        );

        let mut config = Config::default();
        config.providers.docker.agent_socket_dir = "relative/dir".into();
        assert_single_problem(&config, "providers.docker.agent_socket_dir");
        config.providers.docker.agent_socket_dir = format!("/{}", "d".repeat(76)).into();
        assert_single_problem(&config, "providers.docker.agent_socket_dir");
        config.providers.docker.agent_socket_dir = format!("/{}", "d".repeat(75)).into();
        assert!(config.validate().is_empty(), "107 bytes fit");
        config.providers.docker.agent_socket_dir = "relative/dir".into();
        config.providers.docker.agent = crate::config::DockerAgentMode::Never;
        assert!(config.validate().is_empty(), "unused without the agent");

        let mut config = Config::default();
        config.pool.provider = "nope".to_owned();
        assert!(config.validate().is_empty());
        config.pool.enabled = true;
        assert_single_problem(&config, "pool.provider");
    }

    #[test]
    fn every_problem_is_reported_at_once() {
        let mut config = Config::default();
        config.server.max_body_bytes = 0;
        config.events.history_size = 0;
        config.worker.id = String::new();
        assert_eq!(
            keys(&config.validate()),
            vec!["server.max_body_bytes", "worker.id", "events.history_size"]
        );
    }

    #[test]
    fn auth_enabled_with_a_key_is_valid() {
        let mut config = Config::default();
        config.auth.enabled = true;
        config.auth.admin_api_key = Secret::new("k");
        assert!(config.validate().is_empty());
    }

    fn production_ready() -> Config {
        let mut config = Config::default();
        config.server.cors_allowed_origins = vec![
            "https://app.example.com".to_owned(),
            "http://localhost:3000".to_owned(),
        ];
        config.auth.enabled = true;
        config.auth.api_key = Secret::new("a".repeat(32));
        config.auth.admin_api_key = Secret::new("b".repeat(40));
        config.providers.mock.enabled = false;
        config
    }

    #[test]
    fn production_ready_config_has_no_findings() {
        let config = production_ready();
        assert_eq!(config.production_problems(), Vec::new());
        assert!(config.validate().is_empty());
    }

    #[test]
    fn default_config_fails_the_production_lint() {
        let problems = Config::default().production_problems();
        assert_eq!(
            keys(&problems),
            vec![
                "server.cors_allowed_origins",
                "auth.enabled",
                "auth.api_key",
                "auth.admin_api_key",
                "providers.mock.enabled"
            ],
            "{problems:?}"
        );
        assert!(problems[0].message.contains("wildcard"));
    }

    #[test]
    fn production_lint_cases() {
        type Mutate = fn(&mut Config);
        let cases: &[(Mutate, &[&str])] = &[
            (
                |c| c.server.cors_allowed_origins.clear(),
                &["server.cors_allowed_origins"],
            ),
            (
                |c| c.server.cors_allowed_origins.push("*".to_owned()),
                &["server.cors_allowed_origins"],
            ),
            (|c| c.auth.enabled = false, &["auth.enabled"]),
            (|c| c.auth.api_key = Secret::new("short"), &["auth.api_key"]),
            (
                |c| c.auth.admin_api_key = Secret::default(),
                &["auth.admin_api_key"],
            ),
            (
                |c| c.providers.mock.enabled = true,
                &["providers.mock.enabled"],
            ),
            (
                |c| c.worker.id = "replica-1".to_owned(),
                &["database.driver"],
            ),
            (|c| c.worker.rpc_tls.enabled = true, &["database.driver"]),
            (
                |c| {
                    c.worker.id = "replica-1".to_owned();
                    c.database.driver = DatabaseDriver::Postgres;
                },
                &[],
            ),
            (
                |c| {
                    c.worker.rpc.enabled = true;
                    c.worker.rpc.token = Secret::new("node-token");
                    c.database.driver = DatabaseDriver::Postgres;
                },
                &["worker.rpc_tls.enabled"],
            ),
            (
                |c| c.auth.oidc_issuer = "https://idp.example.com".to_owned(),
                &[
                    "auth.oidc_jwks_url",
                    "auth.oidc_audience",
                    "auth.oidc_admin_groups",
                ],
            ),
            (
                |c| {
                    c.auth.oidc_jwks_url = "http://idp.example.com/jwks".to_owned();
                    c.auth.oidc_audience = "svc".to_owned();
                    c.auth.oidc_viewer_groups = vec!["staff".to_owned()];
                },
                &["auth.oidc_issuer", "auth.oidc_jwks_url"],
            ),
        ];
        for (mutate, expected) in cases {
            let mut config = production_ready();
            mutate(&mut config);
            let problems = config.production_problems();
            assert_eq!(keys(&problems), expected.to_vec(), "{problems:?}");
        }

        let mut config = production_ready();
        config.auth.oidc_issuer = "https://idp.example.com".to_owned();
        config.auth.oidc_jwks_url = "https://idp.example.com/jwks".to_owned();
        config.auth.oidc_audience = "svc".to_owned();
        config.auth.oidc_tenant_admin_groups = vec!["leads".to_owned()];
        assert_eq!(config.production_problems(), Vec::new());
    }

    #[test]
    fn short_key_message_counts_characters_without_revealing_the_key() {
        let mut config = production_ready();
        config.auth.api_key = Secret::new("secret-key");
        let problems = config.production_problems();
        assert_eq!(problems.len(), 1);
        assert!(problems[0].message.contains("got 10"), "{}", problems[0]);
        assert!(!problems[0].message.contains("secret-key"));
    }

    #[test]
    fn cors_entries_must_be_bare_origins() {
        let good = [
            "https://app.example.com",
            "http://localhost",
            "http://localhost:3000",
            "https://a-b.example.co.uk:8443",
            "http://127.0.0.1:8080",
            "https://[::1]:8443",
            "https://[2001:db8::1]",
        ];
        let bad = [
            "",
            "app.example.com",
            "ftp://example.com",
            "https://",
            "https://example.com/",
            "https://example.com/app",
            "https://example.com?x=1",
            "https://example.com:",
            "https://example.com:0",
            "https://example.com:99999",
            "https://example.com:80:80",
            "https://user@example.com",
            "https://exa mple.com",
            "https://-bad.example.com",
            "https://example..com",
            "https://[::1",
            "https://[::1]x",
            " https://example.com",
        ];
        for origin in good {
            assert!(is_http_origin(origin), "{origin:?} refused");
        }
        for origin in bad {
            assert!(!is_http_origin(origin), "{origin:?} accepted");
            let mut config = production_ready();
            config.server.cors_allowed_origins = vec![origin.to_owned()];
            let problems = config.production_problems();
            assert_eq!(keys(&problems), vec!["server.cors_allowed_origins"]);
        }
    }
}
