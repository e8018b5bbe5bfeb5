//! Per-route request counts and latency histograms for the scrape, recorded by the HTTP
//! layer's observation middleware. Labels are the route template (`/api/v1/sandboxes/{id}`,
//! `unmatched` for unknown paths), the method and, for counts, the status: their number is
//! bounded by the routes, whatever the clients send.

use prometheus::{HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry};

/// The HTTP request metrics.
pub struct HttpMetrics {
    registry: Registry,
    requests: IntCounterVec,
    latency: HistogramVec,
}

impl Default for HttpMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl HttpMetrics {
    /// Registers the two families.
    pub fn new() -> Self {
        let requests = IntCounterVec::new(
            Opts::new(
                "svc_http_requests_total",
                "HTTP requests answered, by route, method and status.",
            ),
            &["route", "method", "status"],
        )
        .expect("valid metric definition");
        let latency = HistogramVec::new(
            HistogramOpts::new(
                "svc_http_request_duration_seconds",
                "Time to answer an HTTP request (until its headers), by route and method.",
            )
            .buckets(vec![
                0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                10.0,
            ]),
            &["route", "method"],
        )
        .expect("valid metric definition");
        let registry = Registry::new();
        registry
            .register(Box::new(requests.clone()))
            .expect("registered once");
        registry
            .register(Box::new(latency.clone()))
            .expect("registered once");
        HttpMetrics {
            registry,
            requests,
            latency,
        }
    }

    /// Counts one answered request.
    pub fn observe(&self, route: &str, method: &str, status: u16, seconds: f64) {
        let code = status.to_string();
        self.requests
            .with_label_values(&[route, method, code.as_str()])
            .inc();
        self.latency
            .with_label_values(&[route, method])
            .observe(seconds);
    }

    /// The families, for the scrape.
    pub(crate) fn gather(&self) -> Vec<prometheus::proto::MetricFamily> {
        self.registry.gather()
    }
}
