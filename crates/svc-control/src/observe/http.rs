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

    /// Counts one answered request. Methods outside HTTP's standard ones count as `other`
    /// (decisions §30): a client inventing methods must not invent series.
    pub fn observe(&self, route: &str, method: &str, status: u16, seconds: f64) {
        let method = known_method(method);
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

/// `method` when it is one of HTTP's standard methods, else `other`.
fn known_method(method: &str) -> &str {
    const KNOWN: &[&str] = &[
        "GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH",
    ];
    if KNOWN.contains(&method) {
        method
    } else {
        "other"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invented_methods_share_one_series() {
        let metrics = HttpMetrics::new();
        for n in 0..50 {
            metrics.observe("unmatched", &format!("M{n}"), 405, 0.001);
        }
        metrics.observe("unmatched", "GET", 404, 0.001);
        let requests = metrics
            .gather()
            .into_iter()
            .find(|f| f.name() == "svc_http_requests_total")
            .expect("the requests family");
        let methods: Vec<String> = requests
            .get_metric()
            .iter()
            .flat_map(|m| m.get_label().iter())
            .filter(|l| l.name() == "method")
            .map(|l| l.value().to_owned())
            .collect();
        assert_eq!(methods.len(), 2, "{methods:?}");
        assert!(methods.contains(&"other".to_owned()) && methods.contains(&"GET".to_owned()));
    }
}
