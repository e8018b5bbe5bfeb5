//! How far an image pull is (decisions §17, "Pull progress"). The engine reports each layer on
//! its own; [`PullTally`] sums them into one figure, and a [`ProgressSink`] carries it from the
//! provider to whoever watches the spawn.

use std::collections::HashMap;
use std::sync::Arc;

/// Bytes pulled so far for one image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullProgress {
    /// The image being pulled.
    pub image: String,
    /// Bytes downloaded, over every layer.
    pub current_bytes: u64,
    /// Bytes to download, over the layers whose size is known yet.
    pub total_bytes: u64,
}

/// Where a spawn reports its pull's progress; reports are dropped when no one listens.
#[derive(Clone, Default)]
pub struct ProgressSink(Option<Arc<dyn Fn(PullProgress) + Send + Sync>>);

impl ProgressSink {
    /// A sink calling `report` for each report. It must not block: it runs on the pull's task.
    pub fn new(report: impl Fn(PullProgress) + Send + Sync + 'static) -> Self {
        ProgressSink(Some(Arc::new(report)))
    }

    /// Passes one report on.
    pub fn report(&self, progress: PullProgress) {
        if let Some(report) = &self.0 {
            report(progress);
        }
    }
}

impl std::fmt::Debug for ProgressSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "ProgressSink(listening)"
        } else {
            "ProgressSink(none)"
        })
    }
}

/// Any two sinks are equal: where progress goes is not part of what a spawn asks for.
impl PartialEq for ProgressSink {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for ProgressSink {}

/// Sums the engine's per-layer pull messages.
#[derive(Debug, Default)]
pub struct PullTally {
    /// Layer ID → (downloaded, size).
    layers: HashMap<String, (u64, u64)>,
}

impl PullTally {
    /// Takes one message of the engine's pull stream: a layer `id`, its `status` and the
    /// progress detail. Returns whether the totals changed.
    pub fn update(
        &mut self,
        id: Option<&str>,
        status: Option<&str>,
        current: Option<i64>,
        total: Option<i64>,
    ) -> bool {
        let (Some(id), Some(status)) = (id, status) else {
            return false;
        };
        let before = self.totals();
        let to_u64 = |v: Option<i64>| v.and_then(|v| u64::try_from(v).ok());
        match status {
            "Downloading" => {
                let entry = self.layers.entry(id.to_owned()).or_default();
                if let Some(total) = to_u64(total).filter(|t| *t > 0) {
                    entry.1 = total;
                }
                if let Some(current) = to_u64(current) {
                    entry.0 = current;
                }
            }
            // The layer is all there: count it whole.
            "Verifying Checksum" | "Download complete" | "Pull complete" => {
                if let Some(entry) = self.layers.get_mut(id) {
                    entry.0 = entry.1.max(entry.0);
                }
            }
            _ => {}
        }
        self.totals() != before
    }

    /// `(downloaded, size)` over every layer seen.
    pub fn totals(&self) -> (u64, u64) {
        self.layers
            .values()
            .fold((0, 0), |(c, t), (lc, lt)| (c + lc, t + lt))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layers_are_summed_and_completed_layers_count_whole() {
        let mut tally = PullTally::default();
        assert!(!tally.update(Some("a"), Some("Pulling fs layer"), None, None));
        assert!(tally.update(Some("a"), Some("Downloading"), Some(10), Some(100)));
        assert!(tally.update(Some("b"), Some("Downloading"), Some(5), Some(50)));
        assert_eq!(tally.totals(), (15, 150));
        assert!(tally.update(Some("a"), Some("Download complete"), None, None));
        assert_eq!(tally.totals(), (105, 150));
        assert!(
            !tally.update(Some("a"), Some("Extracting"), Some(3), Some(100)),
            "extraction is not download progress"
        );
        assert!(!tally.update(None, Some("Digest: sha256:..."), None, None));
    }
}
