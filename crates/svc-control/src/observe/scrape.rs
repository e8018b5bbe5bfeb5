//! The Prometheus text exposition (format 0.0.4) of a [`Snapshot`]: interface.md's families
//! with their labels, plus the HTTP request metrics. Gauges are set from the snapshot into a
//! registry made for this scrape, so nothing is kept between scrapes but the HTTP counters.

use prometheus::core::Collector;
use prometheus::proto::{Metric, MetricFamily, MetricType, Summary};
use prometheus::{
    CounterVec, Encoder, GaugeVec, IntCounterVec, IntGaugeVec, Opts, Registry, TextEncoder,
};
use svc_core::Error;

use super::Snapshot;
use crate::ControlPlane;

/// The label values of a family without labels.
const NO_LABELS: &[&str] = &[];

fn failed(err: prometheus::Error) -> Error {
    Error::internal("building the metrics exposition", err)
}

fn gauge(
    registry: &Registry,
    name: &str,
    help: &str,
    labels: &[&str],
) -> Result<IntGaugeVec, Error> {
    let family = IntGaugeVec::new(Opts::new(name, help), labels).map_err(failed)?;
    register(registry, &family)?;
    Ok(family)
}

fn counter(
    registry: &Registry,
    name: &str,
    help: &str,
    labels: &[&str],
) -> Result<IntCounterVec, Error> {
    let family = IntCounterVec::new(Opts::new(name, help), labels).map_err(failed)?;
    register(registry, &family)?;
    Ok(family)
}

fn register(registry: &Registry, family: &(impl Collector + Clone + 'static)) -> Result<(), Error> {
    registry.register(Box::new(family.clone())).map_err(failed)
}

fn int(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// `svc_spawn_queue_wait_milliseconds` as a summary without quantiles: its `_count` line is the
/// name interface.md requires, and its `_sum` the total wait.
fn queue_wait_summary(count: u64, total_ms: u64) -> MetricFamily {
    let mut summary = Summary::default();
    summary.set_sample_count(count);
    summary.set_sample_sum(total_ms as f64);
    let mut metric = Metric::default();
    metric.set_summary(summary);
    let mut family = MetricFamily::default();
    family.set_name("svc_spawn_queue_wait_milliseconds".to_owned());
    family.set_help("Time admitted spawns waited in the spawn queue, in milliseconds.".to_owned());
    family.set_field_type(MetricType::SUMMARY);
    family.set_metric(vec![metric]);
    family
}

/// The exposition text.
pub(super) fn render(plane: &ControlPlane, s: &Snapshot) -> Result<String, Error> {
    let registry = Registry::new();
    let uptime = GaugeVec::new(
        Opts::new("svc_uptime_seconds", "Seconds since the server started."),
        &[],
    )
    .map_err(failed)?;
    register(&registry, &uptime)?;
    uptime
        .with_label_values(NO_LABELS)
        .set(plane.uptime().as_secs_f64());

    let healthy = gauge(
        &registry,
        "svc_provider_healthy",
        "1 when the provider's last health check passed, else 0.",
        &["provider", "default"],
    )?;
    for p in &s.providers {
        let default = if p.default { "true" } else { "false" };
        healthy
            .with_label_values(&[p.name.as_str(), default])
            .set(i64::from(p.healthy));
    }

    let queue = &s.scheduler.queue;
    gauge(
        &registry,
        "svc_spawn_queue_depth",
        "Spawns waiting in the spawn queue.",
        &[],
    )?
    .with_label_values(NO_LABELS)
    .set(int(queue.spawn_queue_depth as u64));
    gauge(
        &registry,
        "svc_owner_quotas_total",
        "Owner quotas saved.",
        &[],
    )?
    .with_label_values(NO_LABELS)
    .set(int(s.quotas.total));
    counter(
        &registry,
        "svc_rate_limit_blocked_total",
        "Requests refused by the API rate limit.",
        &[],
    )?
    .with_label_values(NO_LABELS)
    .inc_by(s.rate_limit.limited_total);

    let workers = gauge(
        &registry,
        "svc_workers_total",
        "Registered workers: all (total), online and fresh, stale, unhealthy.",
        &["status"],
    )?;
    for (status, value) in [
        ("total", s.workers.total),
        ("online", s.workers.online),
        ("stale", s.workers.stale),
        ("unhealthy", s.workers.unhealthy),
    ] {
        workers.with_label_values(&[status]).set(int(value));
    }

    let leases = gauge(
        &registry,
        "svc_leases_total",
        "Leases: all rows (total), unexpired (active), expired or released.",
        &["status"],
    )?;
    for (status, value) in [
        ("total", s.leases.total),
        ("active", s.leases.active),
        ("expired", s.leases.expired),
    ] {
        leases.with_label_values(&[status]).set(int(value));
    }

    let by_worker = gauge(
        &registry,
        "svc_sandboxes_by_worker_total",
        "Sandboxes holding a runtime, by worker.",
        &["worker"],
    )?;
    for (worker, count) in &s.sandboxes.by_worker {
        by_worker
            .with_label_values(&[worker.as_str()])
            .set(int(*count));
    }
    let by_state = gauge(
        &registry,
        "svc_sandboxes",
        "Sandbox records held, by state.",
        &["state"],
    )?;
    for (state, count) in &s.sandboxes.by_state {
        by_state
            .with_label_values(&[state.as_str()])
            .set(int(*count));
    }

    counter(
        &registry,
        "svc_events_total",
        "Events published since start.",
        &[],
    )?
    .with_label_values(NO_LABELS)
    .inc_by(s.events.events_total);
    gauge(
        &registry,
        "svc_event_subscribers",
        "Live event stream subscribers.",
        &[],
    )?
    .with_label_values(NO_LABELS)
    .set(int(s.events.subscribers as u64));

    let success = counter(
        &registry,
        "svc_operation_success_total",
        "Provider operations that succeeded, by operation and provider.",
        &["operation", "provider"],
    )?;
    let failure = counter(
        &registry,
        "svc_operation_failure_total",
        "Provider operations that failed, by operation and provider.",
        &["operation", "provider"],
    )?;
    let latency = CounterVec::new(
        Opts::new(
            "svc_operation_duration_seconds_total",
            "Total seconds spent in provider operations, by operation and provider.",
        ),
        &["operation", "provider"],
    )
    .map_err(failed)?;
    register(&registry, &latency)?;
    for op in &s.operations {
        let labels = [op.operation, op.provider];
        success.with_label_values(&labels).inc_by(op.success_total);
        failure.with_label_values(&labels).inc_by(op.failure_total);
        latency
            .with_label_values(&labels)
            .inc_by(op.latency_total_ms / 1000.0);
    }

    let warm_ready = gauge(
        &registry,
        "svc_warm_pool_ready",
        "Warm runtimes ready on this server, by template.",
        &["template"],
    )?;
    let warm_hits = counter(
        &registry,
        "svc_warm_pool_hits_total",
        "Spawns that took a warm runtime, by template.",
        &["template"],
    )?;
    let warm_misses = counter(
        &registry,
        "svc_warm_pool_misses_total",
        "Spawns of a template with a warm pool that found none ready, by template.",
        &["template"],
    )?;
    for pool in plane.inner.warm.stats() {
        let labels = [pool.template.as_str()];
        warm_ready
            .with_label_values(&labels)
            .set(int(pool.ready as u64));
        warm_hits.with_label_values(&labels).inc_by(pool.hits);
        warm_misses.with_label_values(&labels).inc_by(pool.misses);
    }

    let mut families = registry.gather();
    families.push(queue_wait_summary(
        queue.spawn_queue_wait_count,
        queue.spawn_queue_wait_total_ms,
    ));
    families.extend(plane.http_metrics().gather());
    let mut text = Vec::new();
    TextEncoder::new()
        .encode(&families, &mut text)
        .map_err(failed)?;
    String::from_utf8(text).map_err(|e| Error::internal("the metrics exposition", e))
}
