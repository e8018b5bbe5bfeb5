//! Loading the configuration (decisions §1): built-in defaults, then the YAML file (`--config`, else
//! `./svc.yaml` when present), then `SVC_` environment overrides, merged into one JSON tree and
//! deserialized once into [`Config`], so an unknown key or a wrong type is reported with its dotted
//! key path, whichever source it came from. [`Config::validate`] then runs; any problem stops
//! loading. Loading has no side effects beyond reading the file: the caller logs the warnings.
//!
//! Environment overrides: `SVC_` + the key path with `__` between levels, matched
//! case-insensitively (`SVC_SERVER__PORT`). The type of the key is read from the serialized
//! default configuration: integers, `true`/`false`, comma-separated lists (items trimmed, empty
//! items dropped, an empty value is an empty list), strings as given. A map key (an empty object
//! in the defaults, i.e. `auth.worker_tokens`) takes one entry per variable
//! (`SVC_AUTH__WORKER_TOKENS__W1=token`; the entry key is lowercased like the rest of the path) or
//! the whole map as `id=value,id=value`. A `SVC_` variable that names no key is a warning, because
//! other programs use the prefix too.
//!
//! In the YAML file a key whose value is null (`server:` with every child commented out) counts as
//! absent, so its default applies.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};
use svc_core::config::{Config, ConfigProblem};

/// File read when no `--config` is given and it exists in the working directory.
pub const DEFAULT_CONFIG_FILE: &str = "svc.yaml";
/// Prefix of environment variables that override keys.
pub const ENV_PREFIX: &str = "SVC_";

/// The command-line client's own variables (decisions §19): not configuration keys, and no
/// reason to warn when the server finds them set.
const CLIENT_VARS: [&str; 3] = ["SVC_URL", "SVC_API_KEY", "SVC_TOKEN"];
/// Separator between key levels in an environment variable name.
const ENV_LEVEL_SEPARATOR: &str = "__";

/// A loaded, validated configuration.
#[derive(Debug, Clone)]
pub struct LoadedConfig {
    /// The configuration.
    pub config: Config,
    /// The YAML file that was read, if any.
    pub source: Option<PathBuf>,
    /// `SVC_` variables that were ignored, one message each, for the caller to log.
    pub warnings: Vec<String>,
}

/// Why the configuration could not be loaded. Messages never contain secret values.
#[derive(Debug, thiserror::Error)]
pub enum ConfigLoadError {
    /// The file could not be read.
    #[error("cannot read config file {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not YAML, or not a mapping at the top.
    #[error("cannot parse config file {}: {source}", path.display())]
    Yaml {
        /// The file.
        path: PathBuf,
        /// The parse error, with its line and column when known.
        #[source]
        source: serde_norway::Error,
    },
    /// Unknown keys, wrong types or out-of-range values; one problem per key.
    #[error("invalid configuration:{}", render_problems(problems))]
    Invalid {
        /// Every problem found.
        problems: Vec<ConfigProblem>,
    },
    /// An `SVC_` variable whose value does not fit its key.
    #[error("environment variable {var}: {message}")]
    Env {
        /// The variable name.
        var: String,
        /// The key and what is wrong with the value.
        message: String,
    },
}

fn render_problems(problems: &[ConfigProblem]) -> String {
    problems
        .iter()
        .map(|problem| format!("\n  {problem}"))
        .collect()
}

/// The `SVC_` variables of this process, for [`load_config`]. Variables that are not valid UTF-8
/// are skipped.
pub fn process_env() -> Vec<(String, String)> {
    std::env::vars_os()
        .filter_map(|(name, value)| Some((name.into_string().ok()?, value.into_string().ok()?)))
        .filter(|(name, _)| name.starts_with(ENV_PREFIX))
        .collect()
}

/// Loads the configuration from the defaults, the YAML file at `path` (or `./svc.yaml` when it
/// exists and `path` is `None`; a missing explicit `path` is an error) and the `SVC_` variables in
/// `env` (other variables are ignored), then validates it.
pub fn load_config(
    path: Option<&Path>,
    env: &[(String, String)],
) -> Result<LoadedConfig, ConfigLoadError> {
    let file = match path {
        Some(path) => Some(path.to_path_buf()),
        None => {
            let default = PathBuf::from(DEFAULT_CONFIG_FILE);
            default.exists().then_some(default)
        }
    };
    let text = match &file {
        Some(path) => {
            Some(
                std::fs::read_to_string(path).map_err(|source| ConfigLoadError::Io {
                    path: path.clone(),
                    source,
                })?,
            )
        }
        None => None,
    };
    let yaml = file.as_deref().zip(text.as_deref());
    load_config_from_sources(yaml, env)
}

/// [`load_config`] without the file system: `file` is the YAML file's path and contents.
pub fn load_config_from_sources(
    file: Option<(&Path, &str)>,
    env: &[(String, String)],
) -> Result<LoadedConfig, ConfigLoadError> {
    let mut tree = match file {
        Some((path, text)) => parse_yaml(path, text)?,
        None => Map::new(),
    };

    // The serialized defaults are the schema: every key, with a value of its type. Secrets
    // serialize as "" (unset by default), which is all the type lookup needs.
    let schema = serde_json::to_value(Config::default())
        .expect("the default config serializes: every map key in it is a string");

    let mut sorted_env: Vec<&(String, String)> = env
        .iter()
        .filter(|(name, _)| name.starts_with(ENV_PREFIX) && !CLIENT_VARS.contains(&name.as_str()))
        .collect();
    // Deterministic when two spellings (`SVC_X` and `SVC_x`) name the same key.
    sorted_env.sort();
    let mut warnings = Vec::new();
    let mut env_keys: Vec<(String, String)> = Vec::new();
    for (var, raw) in sorted_env {
        match resolve_env_key(var, &schema) {
            Ok(target) => {
                let value = parse_env_value(var, &target, raw)?;
                if set_path(&mut tree, &target.path, value) {
                    env_keys.push((target.path.join("."), var.clone()));
                }
            }
            Err(reason) => warnings.push(format!("ignoring environment variable {var}: {reason}")),
        }
    }

    let mock_named = mock_named(&tree);
    let mut config: Config =
        serde_path_to_error::deserialize(Value::Object(tree)).map_err(|error| {
            let key = error.path().to_string();
            let message = error.inner().to_string();
            match env_var_for_key(&env_keys, &key) {
                Some(var) => ConfigLoadError::Env {
                    var: var.to_owned(),
                    message: format!("{key}: {message}"),
                },
                None => ConfigLoadError::Invalid {
                    problems: vec![ConfigProblem::new(key, message)],
                },
            }
        })?;

    if config.auth.required() && config.providers.mock.enabled && !mock_named {
        // The mock runs commands as host processes: a server that asks its callers who they
        // are must not hand each of them the host unless the operator says so (decisions §30).
        config.providers.mock.enabled = false;
        warnings.push(
            "the mock provider is off: authentication is configured and the configuration does not \
             name it (providers.mock.enabled: true or providers.default: mock)"
                .to_owned(),
        );
    }

    let problems = config.validate();
    if !problems.is_empty() {
        return Err(ConfigLoadError::Invalid { problems });
    }
    Ok(LoadedConfig {
        config,
        source: file.map(|(path, _)| path.to_path_buf()),
        warnings,
    })
}

/// Whether the file or the environment names the mock provider: `providers.mock.enabled: true`
/// or `providers.default: mock` (the built-in default alone does not).
fn mock_named(tree: &Map<String, Value>) -> bool {
    let providers = tree.get("providers");
    let mock_enabled = providers
        .and_then(|p| p.get("mock"))
        .and_then(|m| m.get("enabled"));
    let default = providers.and_then(|p| p.get("default"));
    mock_enabled == Some(&Value::Bool(true)) || default.and_then(Value::as_str) == Some("mock")
}

fn parse_yaml(path: &Path, text: &str) -> Result<Map<String, Value>, ConfigLoadError> {
    let yaml_error = |source| ConfigLoadError::Yaml {
        path: path.to_path_buf(),
        source,
    };
    let value: Value = serde_norway::from_str(text).map_err(yaml_error)?;
    match value {
        // An empty file, or one with only comments.
        Value::Null => Ok(Map::new()),
        Value::Object(mut map) => {
            drop_nulls(&mut map);
            Ok(map)
        }
        other => Err(yaml_error(serde::de::Error::custom(format!(
            "the top level must be a mapping of sections such as `server:`, found {}",
            json_type_name(&other)
        )))),
    }
}

/// Removes null-valued keys at every level of nested mappings (null inside a list stays, and fails
/// as a wrong type).
fn drop_nulls(map: &mut Map<String, Value>) {
    map.retain(|_, value| !value.is_null());
    for value in map.values_mut() {
        if let Value::Object(child) = value {
            drop_nulls(child);
        }
    }
}

fn json_type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

/// The type of value a key takes, read from the default configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EnvKind {
    Bool,
    Integer,
    String,
    List(ItemKind),
    /// A whole map, given as `id=value,id=value`.
    Map,
}

/// The type of a list item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ItemKind {
    Bool,
    Integer,
    String,
}

/// A key named by an environment variable.
#[derive(Debug)]
struct EnvTarget {
    path: Vec<String>,
    kind: EnvKind,
}

/// Finds the key `var` names, or says why it names none.
fn resolve_env_key(var: &str, schema: &Value) -> Result<EnvTarget, String> {
    let rest = var
        .get(ENV_PREFIX.len()..)
        .unwrap_or_default()
        .to_lowercase();
    let path: Vec<String> = rest.split(ENV_LEVEL_SEPARATOR).map(str::to_owned).collect();
    if path.iter().any(String::is_empty) {
        return Err(format!(
            "names no configuration key (expected {ENV_PREFIX}SECTION__KEY)"
        ));
    }
    let mut node = schema;
    for (depth, segment) in path.iter().enumerate() {
        let Value::Object(fields) = node else {
            return Err(format!(
                "names no configuration key: {} is not a section",
                path[..depth].join(".")
            ));
        };
        // Only maps are empty objects in the defaults: a section always has keys.
        if fields.is_empty() {
            if depth + 1 == path.len() {
                return Ok(EnvTarget {
                    path,
                    kind: EnvKind::String,
                });
            }
            return Err(format!(
                "names no configuration key: entries of {} are plain values",
                path[..depth].join(".")
            ));
        }
        node = fields.get(segment.as_str()).ok_or_else(|| {
            format!(
                "names no configuration key ({} is unknown)",
                path[..=depth].join(".")
            )
        })?;
    }
    let kind = match node {
        Value::Bool(_) => EnvKind::Bool,
        Value::Number(_) => EnvKind::Integer,
        Value::String(_) | Value::Null => EnvKind::String,
        Value::Array(items) => EnvKind::List(match items.first() {
            Some(Value::Bool(_)) => ItemKind::Bool,
            Some(Value::Number(_)) => ItemKind::Integer,
            _ => ItemKind::String,
        }),
        Value::Object(fields) if fields.is_empty() => EnvKind::Map,
        Value::Object(_) => {
            return Err(format!(
                "names the section {}, not a key (set {var}__KEY instead)",
                path.join(".")
            ))
        }
    };
    Ok(EnvTarget { path, kind })
}

/// Converts the raw variable value to the key's type. Errors never echo string or map values,
/// which may be secrets.
fn parse_env_value(var: &str, target: &EnvTarget, raw: &str) -> Result<Value, ConfigLoadError> {
    let key = target.path.join(".");
    let env_error = |message: String| ConfigLoadError::Env {
        var: var.to_owned(),
        message: format!("{key}: {message}"),
    };
    match target.kind {
        EnvKind::String => Ok(Value::String(raw.to_owned())),
        EnvKind::Bool => parse_bool(raw).map_err(env_error),
        EnvKind::Integer => parse_integer(raw).map_err(env_error),
        EnvKind::List(item_kind) => raw
            .split(',')
            .map(str::trim)
            .filter(|item| !item.is_empty())
            .map(|item| match item_kind {
                ItemKind::String => Ok(Value::String(item.to_owned())),
                ItemKind::Bool => parse_bool(item),
                ItemKind::Integer => parse_integer(item),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Value::Array)
            .map_err(|message| env_error(format!("list item {message}"))),
        EnvKind::Map => {
            let mut map = Map::new();
            for entry in raw.split(',').map(str::trim).filter(|e| !e.is_empty()) {
                let Some((entry_key, value)) = entry.split_once('=') else {
                    return Err(env_error(format!(
                        "expected comma-separated id=value entries, or one entry per variable \
                         as {var}__<ID>"
                    )));
                };
                let entry_key = entry_key.trim();
                if entry_key.is_empty() {
                    return Err(env_error("an entry has an empty id".to_owned()));
                }
                map.insert(entry_key.to_owned(), Value::String(value.trim().to_owned()));
            }
            Ok(Value::Object(map))
        }
    }
}

fn parse_bool(raw: &str) -> Result<Value, String> {
    let trimmed = raw.trim();
    if trimmed.eq_ignore_ascii_case("true") {
        Ok(Value::Bool(true))
    } else if trimmed.eq_ignore_ascii_case("false") {
        Ok(Value::Bool(false))
    } else {
        Err(format!("expected true or false, got {raw:?}"))
    }
}

fn parse_integer(raw: &str) -> Result<Value, String> {
    let trimmed = raw.trim();
    if let Ok(signed) = trimmed.parse::<i64>() {
        return Ok(Value::from(signed));
    }
    trimmed
        .parse::<u64>()
        .map(Value::from)
        .map_err(|_| format!("expected an integer, got {raw:?}"))
}

/// Sets `value` at `path`, creating missing mappings. Returns false, leaving the tree alone, when
/// the file put a non-mapping where a section belongs: deserialization then reports that value.
fn set_path(tree: &mut Map<String, Value>, path: &[String], value: Value) -> bool {
    let Some((last, parents)) = path.split_last() else {
        return false;
    };
    let mut node = tree;
    for segment in parents {
        let child = node
            .entry(segment.clone())
            .or_insert_with(|| Value::Object(Map::new()));
        let Value::Object(child) = child else {
            return false;
        };
        node = child;
    }
    node.insert(last.clone(), value);
    true
}

/// The variable that set `key` or a key containing it (a list item or map entry), if any.
fn env_var_for_key<'a>(env_keys: &'a [(String, String)], key: &str) -> Option<&'a str> {
    env_keys
        .iter()
        .rev()
        .find(|(env_key, _)| {
            key == env_key
                || key
                    .strip_prefix(env_key.as_str())
                    .is_some_and(|rest| rest.starts_with('.') || rest.starts_with('['))
        })
        .map(|(_, var)| var.as_str())
}

#[cfg(test)]
mod tests {
    use svc_core::config::{DatabaseDriver, LogFormat, SpawnOverflow};
    use svc_core::GoDuration;

    use super::*;

    fn env(vars: &[(&str, &str)]) -> Vec<(String, String)> {
        vars.iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn from_yaml(yaml: &str, vars: &[(&str, &str)]) -> Result<LoadedConfig, ConfigLoadError> {
        load_config_from_sources(Some((Path::new("test.yaml"), yaml)), &env(vars))
    }

    fn invalid_keys(error: &ConfigLoadError) -> Vec<String> {
        match error {
            ConfigLoadError::Invalid { problems } => {
                problems.iter().map(|p| p.key.clone()).collect()
            }
            other => panic!("expected Invalid, got {other:?}"),
        }
    }

    #[test]
    fn defaults_when_nothing_is_given() {
        let loaded = load_config_from_sources(None, &[]).unwrap();
        assert_eq!(loaded.config, Config::default());
        assert_eq!(loaded.source, None);
        assert!(loaded.warnings.is_empty());
    }

    #[test]
    fn authentication_turns_the_mock_off_unless_the_configuration_names_it() {
        let keys = "auth:\n  enabled: true\n  api_key: a-key-of-enough-length-0123456789\n";
        let off = from_yaml(keys, &[]).unwrap();
        assert!(!off.config.providers.mock.enabled);
        assert!(
            off.warnings
                .iter()
                .any(|w| w.contains("the mock provider is off")),
            "{:?}",
            off.warnings
        );
        let named = [
            from_yaml(
                &format!("{keys}providers:\n  mock:\n    enabled: true\n"),
                &[],
            ),
            from_yaml(keys, &[("SVC_PROVIDERS__MOCK__ENABLED", "true")]),
            from_yaml(&format!("{keys}providers:\n  default: mock\n"), &[]),
        ];
        for loaded in named {
            let loaded = loaded.unwrap();
            assert!(loaded.config.providers.mock.enabled);
            assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
        }
        // Without authentication the built-in default stands.
        assert!(from_yaml("", &[]).unwrap().config.providers.mock.enabled);
    }

    #[test]
    fn yaml_file_values_apply_over_defaults() {
        let loaded = from_yaml(
            "server:\n  port: 8080\n  host: 0.0.0.0\ndefaults:\n  ttl: 1h\n  spawn_overflow: queue\nlogging:\n  format: json\n",
            &[],
        )
        .unwrap();
        let config = loaded.config;
        assert_eq!(config.server.port, 8080);
        assert_eq!(config.server.host, "0.0.0.0");
        assert_eq!(config.server.preview_domain, "localhost");
        assert_eq!(config.defaults.ttl, GoDuration::from_secs(3600));
        assert_eq!(config.defaults.spawn_overflow, SpawnOverflow::Queue);
        assert_eq!(config.logging.format, LogFormat::Json);
        assert_eq!(loaded.source, Some(PathBuf::from("test.yaml")));
    }

    #[test]
    fn empty_file_and_null_sections_mean_defaults() {
        assert_eq!(from_yaml("", &[]).unwrap().config, Config::default());
        assert_eq!(
            from_yaml("# only a comment\n", &[]).unwrap().config,
            Config::default()
        );
        let loaded = from_yaml("server:\n  # port: 1\nauth:\n  api_key:\n", &[]).unwrap();
        assert_eq!(loaded.config, Config::default());
    }

    #[test]
    fn env_overrides_yaml() {
        let loaded = from_yaml(
            "server:\n  port: 8080\n  host: 0.0.0.0\n",
            &[
                ("SVC_SERVER__PORT", "9090"),
                ("SVC_DEFAULTS__SPAWN_OVERFLOW", "queue"),
                ("SVC_DATABASE__DRIVER", "postgres"),
                ("SVC_DATABASE__DSN", "postgres://u:p@h/d"),
                ("HOME", "/root"),
            ],
        )
        .unwrap();
        assert_eq!(loaded.config.server.port, 9090);
        assert_eq!(loaded.config.server.host, "0.0.0.0");
        assert_eq!(loaded.config.defaults.spawn_overflow, SpawnOverflow::Queue);
        assert_eq!(loaded.config.database.driver, DatabaseDriver::Postgres);
        assert_eq!(loaded.config.database.dsn.expose(), "postgres://u:p@h/d");
        assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    }

    #[test]
    fn env_lists_maps_bools_and_durations() {
        let loaded = from_yaml(
            "auth:\n  worker_tokens:\n    w0: from-file\n",
            &[
                ("SVC_PROVIDERS__DOCKER__DROPPED_CAPS", "ALL, NET_RAW,"),
                ("SVC_PROVIDERS__DOCKER__ADDED_CAPS", ""),
                ("SVC_SERVER__CORS_ALLOWED_ORIGINS", "https://a.example.com"),
                ("SVC_AUTH__WORKER_TOKENS__W1", "tok-1"),
                ("SVC_AUTH__ENABLED", "true"),
                ("SVC_AUTH__API_KEY", "key"),
                ("SVC_PROVIDERS__MOCK__ENABLED", "FALSE"),
                ("SVC_WORKER__RPC_TLS__ENABLED", "true"),
                ("SVC_WORKER__HEARTBEAT_INTERVAL", "5s"),
                ("SVC_PROVIDERS__FIRECRACKER__KERNEL_PATH", "/k/vmlinux"),
            ],
        )
        .unwrap();
        let c = loaded.config;
        assert_eq!(c.providers.docker.dropped_caps, vec!["ALL", "NET_RAW"]);
        assert!(c.providers.docker.added_caps.is_empty());
        assert_eq!(c.server.cors_allowed_origins, vec!["https://a.example.com"]);
        assert_eq!(c.auth.worker_tokens.len(), 2);
        assert_eq!(c.auth.worker_tokens["w0"].expose(), "from-file");
        assert_eq!(c.auth.worker_tokens["w1"].expose(), "tok-1");
        assert!(c.auth.enabled);
        assert!(!c.providers.mock.enabled);
        assert!(c.worker.rpc_tls.enabled);
        assert_eq!(c.worker.heartbeat_interval, GoDuration::from_secs(5));
        assert_eq!(
            c.providers.firecracker.kernel_path,
            PathBuf::from("/k/vmlinux")
        );
    }

    #[test]
    fn env_whole_map_replaces_the_file_map() {
        let loaded = from_yaml(
            "auth:\n  worker_tokens:\n    w0: from-file\n",
            &[("SVC_AUTH__WORKER_TOKENS", "w1=a=b, w2=c")],
        )
        .unwrap();
        let tokens = &loaded.config.auth.worker_tokens;
        assert_eq!(tokens.keys().collect::<Vec<_>>(), vec!["w1", "w2"]);
        assert_eq!(tokens["w1"].expose(), "a=b");
        let error = load_config_from_sources(
            None,
            &env(&[("SVC_AUTH__WORKER_TOKENS", "secret-without-id")]),
        )
        .unwrap_err();
        assert!(
            matches!(&error, ConfigLoadError::Env { var, .. } if var == "SVC_AUTH__WORKER_TOKENS")
        );
        assert!(!error.to_string().contains("secret-without-id"), "{error}");
    }

    #[test]
    fn unknown_env_vars_become_warnings() {
        let loaded = load_config_from_sources(
            None,
            &env(&[
                ("SVC_SERVER__PROT", "1"),
                ("SVC_NOPE", "x"),
                ("SVC_SERVER", "x"),
                ("SVC_SERVER__PORT__X", "1"),
                ("SVC_AUTH__WORKER_TOKENS__W1__X", "1"),
                ("SVC_", "x"),
                ("SVC_SERVER____PORT", "1"),
                ("PATH", "/bin"),
                ("SVC_URL", "http://elsewhere:7423"),
                ("SVC_API_KEY", "k"),
                ("SVC_TOKEN", "t"),
            ]),
        )
        .unwrap();
        assert_eq!(loaded.config, Config::default());
        assert_eq!(loaded.warnings.len(), 7, "{:?}", loaded.warnings);
        assert!(loaded
            .warnings
            .iter()
            .any(|w| w.contains("SVC_SERVER__PROT") && w.contains("server.prot")));
        assert!(loaded
            .warnings
            .iter()
            .any(|w| w.contains("SVC_SERVER:") && w.contains("section")));
    }

    #[test]
    fn bad_env_values_name_the_variable_and_key() {
        let cases = [
            ("SVC_SERVER__PORT", "eighty", "server.port"),
            ("SVC_SERVER__PORT", "70000", "server.port"),
            ("SVC_AUTH__ENABLED", "yes", "auth.enabled"),
            ("SVC_DEFAULTS__TTL", "5", "defaults.ttl"),
            (
                "SVC_DEFAULTS__SPAWN_OVERFLOW",
                "wait",
                "defaults.spawn_overflow",
            ),
            ("SVC_EVENTS__HISTORY_SIZE", "-1", "events.history_size"),
        ];
        for (name, value, key) in cases {
            let error = load_config_from_sources(None, &env(&[(name, value)])).unwrap_err();
            let ConfigLoadError::Env { var, message } = &error else {
                panic!("{name}={value}: expected Env, got {error:?}");
            };
            assert_eq!(var, name);
            assert!(message.starts_with(key), "{name}={value}: {message}");
            assert!(error.to_string().contains(name), "{error}");
        }
    }

    #[test]
    fn unknown_yaml_key_errors_with_its_path() {
        for (yaml, expected) in [
            ("server:\n  prot: 80\n", "prot"),
            ("servr:\n  port: 80\n", "servr"),
            (
                "providers:\n  docker:\n    dropped_cap: [ALL]\n",
                "dropped_cap",
            ),
        ] {
            let error = from_yaml(yaml, &[]).unwrap_err();
            let ConfigLoadError::Invalid { problems } = &error else {
                panic!("expected Invalid, got {error:?}");
            };
            assert_eq!(problems.len(), 1);
            let rendered = error.to_string();
            assert!(rendered.contains(expected), "{rendered}");
            assert!(rendered.contains("unknown field"), "{rendered}");
        }
        let error = from_yaml("providers:\n  docker:\n    dropped_cap: [ALL]\n", &[]).unwrap_err();
        let keys = invalid_keys(&error);
        assert!(keys[0].starts_with("providers.docker"), "{keys:?}");
    }

    #[test]
    fn wrong_yaml_type_errors_with_its_key() {
        for (yaml, key) in [
            ("server:\n  port: eighty\n", "server.port"),
            ("server:\n  port: 70000\n", "server.port"),
            ("defaults:\n  ttl: 30\n", "defaults.ttl"),
            ("auth:\n  enabled: maybe\n", "auth.enabled"),
            ("server: 5\n", "server"),
            (
                "providers:\n  docker:\n    dropped_caps: [ALL, ~]\n",
                "providers.docker.dropped_caps[1]",
            ),
        ] {
            let error = from_yaml(yaml, &[]).unwrap_err();
            assert_eq!(
                invalid_keys(&error),
                vec![key.to_owned()],
                "{yaml:?}: {error}"
            );
        }
        // An env override below a section the file got wrong does not hide the file's error.
        let error = from_yaml("server: 5\n", &[("SVC_SERVER__PORT", "1")]).unwrap_err();
        assert_eq!(invalid_keys(&error), vec!["server".to_owned()]);
    }

    #[test]
    fn malformed_yaml_errors_with_the_file() {
        for yaml in ["server: [1\n", "- server\n", "just a string\n"] {
            let error = from_yaml(yaml, &[]).unwrap_err();
            assert!(
                matches!(error, ConfigLoadError::Yaml { .. }),
                "{yaml:?}: {error:?}"
            );
            assert!(error.to_string().contains("test.yaml"), "{error}");
        }
    }

    #[test]
    fn validation_errors_list_every_problem() {
        let error = from_yaml(
            "server:\n  max_body_bytes: 0\nevents:\n  history_size: 0\n",
            &[("SVC_WORKER__ID", "")],
        )
        .unwrap_err();
        assert_eq!(
            invalid_keys(&error),
            vec!["server.max_body_bytes", "worker.id", "events.history_size"]
        );
        let rendered = error.to_string();
        assert_eq!(rendered.lines().count(), 4, "{rendered}");
        assert!(rendered
            .lines()
            .nth(1)
            .unwrap()
            .contains("server.max_body_bytes: "));
    }

    #[test]
    fn missing_explicit_file_is_an_error() {
        let path = Path::new("/nonexistent/svc-config-test.yaml");
        let error = load_config(Some(path), &[]).unwrap_err();
        assert!(matches!(&error, ConfigLoadError::Io { path: p, .. } if p == path));
        assert!(
            error.to_string().contains("svc-config-test.yaml"),
            "{error}"
        );
    }

    #[test]
    fn reads_an_explicit_file() {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        std::io::Write::write_all(&mut file, b"server:\n  port: 8081\n").unwrap();
        let loaded = load_config(Some(file.path()), &env(&[("SVC_POOL__MAX_VMS", "3")])).unwrap();
        assert_eq!(loaded.config.server.port, 8081);
        assert_eq!(loaded.config.pool.max_vms, 3);
        assert_eq!(loaded.source.as_deref(), Some(file.path()));
    }

    #[test]
    fn secrets_never_appear_in_errors_or_debug() {
        let loaded = load_config_from_sources(
            None,
            &env(&[
                ("SVC_AUTH__API_KEY", "top-secret"),
                ("SVC_AUTH__ENABLED", "true"),
            ]),
        )
        .unwrap();
        assert!(!format!("{loaded:?}").contains("top-secret"));
    }
}
