//! The provider conformance cases on pool mode over the mock: a logical sandbox (a workspace in
//! a shared pool VM, its own user) keeps the contract of a sandbox of its own. The cases are
//! svc-provider's, included as they are; those of the file API name absolute paths, which pool
//! mode confines to the workspace, and are left out here.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use svc_control::{Pool, PoolIdentity};
use svc_core::config::PoolConfig;
use svc_provider::mock::MockProvider;
use svc_provider::Provider;
use svc_store::sqlite::SqliteStore;

#[path = "../../../svc-provider/tests/conformance/cases.rs"]
#[macro_use]
#[allow(dead_code, unused_imports, unused_macros)]
mod cases;

use cases::*;

/// A pool of mock VMs; each sandbox is reserved a seat of its own user first, as admission
/// does.
async fn pool_mock() -> Option<Backend> {
    let dir = tempfile::tempdir().unwrap();
    let mock: Arc<dyn Provider> = Arc::new(MockProvider::new(dir.path().join("mock")));
    let store = Arc::new(SqliteStore::open(":memory:").await.unwrap());
    let config = PoolConfig {
        enabled: true,
        ..PoolConfig::default()
    };
    let image = config.image.clone();
    let pool = Pool::new(
        config,
        mock,
        store,
        Arc::new(svc_core::SystemClock),
        PoolIdentity {
            worker_id: "w1".into(),
            installation_id: "pool-conformance".into(),
            lease_ttl: Duration::from_secs(60),
        },
    );
    let users = Arc::new(AtomicUsize::new(0));
    let seats = Arc::clone(&pool);
    let prepare: Prepare = Arc::new(move |id| {
        let (pool, user) = (Arc::clone(&seats), users.fetch_add(1, Ordering::Relaxed));
        Box::pin(async move {
            pool.reserve_for_tests(&format!("user{user}"), &id)
                .await
                .unwrap();
        })
    });
    Some(Backend {
        provider: pool,
        image,
        prepare: Some(prepare),
        _guard: Some(dir),
    })
}

// The file cases name absolute paths, which pool mode confines to each sandbox's workspace
// (a 400 by design); they run on pool mode through the API in tests/it/pool.rs.
cases_without_absolute_paths!(pool_mock);
