//! Tests of the control plane itself, below HTTP: the spawn pipeline's rollback at every step,
//! a caller that goes away mid-spawn, a crash that left records in `creating`, concurrent
//! spawns at a small capacity, and the permission table on every call.

// Tests panic on purpose when the control plane misbehaves.
#![allow(clippy::unwrap_used)]

mod fixture;
mod pool_conformance;

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use fixture::{Fixture, SpawnFault, WriteFault};
use svc_control::{Action, ListSandboxes, Principal, Role, Subscription};
use svc_core::event::EventType;
use svc_core::sandbox::{Sandbox, SandboxState, SpawnRequest, StateReason};
use svc_core::{Clock, ErrorKind, SandboxId};
use svc_provider::{Provider, SpawnSpec};
use svc_store::Store;

fn request() -> SpawnRequest {
    SpawnRequest::default()
}

/// The types of the events that arrive within a short while.
async fn drain(events: &mut Subscription) -> Vec<EventType> {
    let mut types = Vec::new();
    while let Ok(Some(event)) =
        tokio::time::timeout(Duration::from_millis(200), events.next()).await
    {
        types.push(event.event_type);
    }
    types
}

/// The one record there is, which must have ended as `error` with `spawn_failed`.
async fn the_failed_record(fx: &Fixture) -> Sandbox {
    let records = fx.records().await;
    assert_eq!(records.len(), 1, "{records:?}");
    let record = records.into_iter().next().unwrap();
    assert_eq!(record.state, SandboxState::Error);
    assert_eq!(record.state_reason, Some(StateReason::SpawnFailed));
    assert!(!record.state_message.clone().unwrap_or_default().is_empty());
    record
}

#[tokio::test]
async fn a_spawn_goes_through_every_step() {
    let fx = Fixture::new().await;
    let mut events = fx.events();
    let sandbox = fx.spawn().await.unwrap();
    assert_eq!(sandbox.state, SandboxState::Running);
    assert_eq!(sandbox.state_reason, None);
    assert_eq!(fx.runtimes(), vec![sandbox.id.to_string()]);
    assert_eq!(
        drain(&mut events).await,
        [EventType::SandboxCreated, EventType::SandboxRunning]
    );
}

#[tokio::test]
async fn invalid_input_is_refused_before_anything_is_written_or_spawned() {
    let fx = Fixture::new().await;
    for bad in [
        SpawnRequest {
            image: Some("../../etc".into()),
            ..request()
        },
        SpawnRequest {
            memory_mb: Some(0),
            ..request()
        },
        SpawnRequest {
            provider: Some("nope".into()),
            ..request()
        },
        SpawnRequest {
            owner_id: Some("has space".into()),
            ..request()
        },
        SpawnRequest {
            template: Some("missing".into()),
            ..request()
        },
    ] {
        let err = fx
            .plane
            .spawn_sandbox(&fx.admin(), bad.clone())
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::BadRequest, "{bad:?}: {err}");
    }
    assert!(fx.records().await.is_empty());
    assert_eq!(fx.provider.spawns_started.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_failing_admission_write_leaves_nothing() {
    let fx = Fixture::new().await;
    fx.store.arm(1, WriteFault::Fail);
    let err = fx.spawn().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Internal);
    assert!(
        !err.public_message().contains("injected"),
        "no store detail leaks"
    );
    assert!(fx.records().await.is_empty());
    assert_eq!(fx.provider.spawns_started.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_failing_provider_spawn_ends_the_record_as_error() {
    let fx = Fixture::new().await;
    fx.provider.set_spawn(SpawnFault::Fail);
    let mut events = fx.events();
    let err = fx.spawn().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ProviderError);
    the_failed_record(&fx).await;
    assert!(fx.runtimes().is_empty());
    assert_eq!(
        drain(&mut events).await,
        [
            EventType::SandboxError,
            EventType::OperationFailed,
            EventType::ProviderFailed
        ]
    );
}

#[tokio::test]
async fn a_hanging_provider_spawn_times_out_and_rolls_back() {
    let fx = Fixture::new().await;
    fx.provider.set_spawn(SpawnFault::Hang);
    let started = std::time::Instant::now();
    let err = fx.spawn().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ProviderError);
    assert!(err.to_string().contains("spawn_timeout"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(5));
    the_failed_record(&fx).await;
}

#[tokio::test]
async fn a_runtime_created_after_the_deadline_is_removed_when_it_appears() {
    let fx = Fixture::new().await;
    fx.provider
        .set_spawn(SpawnFault::Slow(Duration::from_millis(600)));
    let err = fx.spawn().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ProviderError);
    the_failed_record(&fx).await;
    // The slow spawn finishes 300 ms after the deadline; its runtime must not outlive it.
    tokio::time::sleep(Duration::from_millis(500)).await;
    fx.wait_for("the late runtime to be removed", || async {
        fx.runtimes().is_empty()
    })
    .await;
}

#[tokio::test]
async fn a_failing_mark_running_removes_the_runtime() {
    let fx = Fixture::new().await;
    // Write 1 admits and records; write 2 marks running.
    fx.store.arm(2, WriteFault::Fail);
    let mut events = fx.events();
    let err = fx.spawn().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Internal);
    the_failed_record(&fx).await;
    assert!(fx.runtimes().is_empty(), "runtime removed");
    let types = drain(&mut events).await;
    assert_eq!(types, [EventType::SandboxError, EventType::OperationFailed]);
}

#[tokio::test]
async fn a_panic_mid_spawn_is_still_undone() {
    let fx = Fixture::new().await;
    fx.store.arm(2, WriteFault::Panic);
    let err = fx.spawn().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Internal);
    fx.wait_for_first_record("the undo after the panic", SandboxState::Error)
        .await;
    assert!(fx.runtimes().is_empty());
}

#[tokio::test]
async fn a_provider_panic_at_spawn_is_a_provider_failure() {
    let fx = Fixture::new().await;
    fx.provider.set_spawn(SpawnFault::Panic);
    let err = fx.spawn().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ProviderError);
    the_failed_record(&fx).await;
}

#[tokio::test]
async fn a_runtime_that_cannot_be_removed_yet_is_removed_in_the_background() {
    let fx = Fixture::new().await;
    fx.store.arm(2, WriteFault::Fail);
    *fx.provider.destroy_fails.lock().unwrap() = true;
    fx.spawn().await.unwrap_err();
    // The caller was told the spawn failed, so the record says so at once.
    let record = the_failed_record(&fx).await;
    assert!(
        record.state_message.unwrap().contains("had to be retried"),
        "the message says the runtime is not gone yet"
    );
    assert_eq!(fx.runtimes(), vec![record.id.to_string()]);
    // A restart now does not bring the failed spawn back.
    let (recovered, reconciled) = fx.recover_after_restart().await;
    assert_eq!(
        (recovered.found, reconciled.swept),
        (0, 0),
        "{recovered:?} {reconciled:?}"
    );
    // Once the provider answers again, the background removal finishes.
    *fx.provider.destroy_fails.lock().unwrap() = false;
    fx.wait_for("the background removal", || async {
        fx.runtimes().is_empty()
    })
    .await;
    assert_eq!(fx.records().await[0].state, SandboxState::Error);
}

#[tokio::test]
async fn a_record_that_cannot_be_ended_yet_is_ended_in_the_background() {
    let fx = Fixture::new().await;
    // Write 2 marks running, write 3 ends the record: both fail; the retry (write 4) works.
    fx.store.arm_span(2, 2, WriteFault::Fail);
    fx.spawn().await.unwrap_err();
    assert!(fx.runtimes().is_empty(), "the runtime went at once");
    fx.wait_for_first_record("the retried end of the record", SandboxState::Error)
        .await;
    the_failed_record(&fx).await;
}

#[tokio::test]
async fn start_up_removes_runtimes_whose_record_has_ended() {
    let fx = Fixture::new().await;
    let sandbox = fx.spawn().await.unwrap();
    // The record ends but the runtime stays, as when svc stopped before a removal succeeded.
    fx.store
        .end_sandbox(
            &sandbox.id,
            svc_store::EndedState::Error,
            &svc_core::sandbox::Ending::because(StateReason::SpawnFailed),
            fx.clock.now(),
        )
        .await
        .unwrap()
        .unwrap();
    let kept = fx.spawn().await.unwrap();
    let (_, reconciled) = fx.recover_after_restart().await;
    assert_eq!(reconciled.swept, 1, "{reconciled:?}");
    assert_eq!(
        fx.runtimes(),
        vec![kept.id.to_string()],
        "a live sandbox is kept"
    );
    let viewer = Principal {
        role: Role::Viewer,
        ..Principal::anonymous(None)
    };
    assert_eq!(
        fx.plane
            .recover_interrupted_spawns(&viewer)
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::Forbidden
    );
}

#[tokio::test]
async fn a_runtime_that_stopped_ends_its_sandbox_as_provider_failed() {
    let fx = Fixture::new().await;
    let stopped = fx.spawn().await.unwrap();
    let kept = fx.spawn().await.unwrap();
    // The runtime exits behind svc's back (a container killed, say).
    fx.provider.stop(&stopped.id);
    let plane = fx.restarted(false);
    let mut events = plane
        .subscribe_events(&fx.admin(), svc_control::EventFilter::default(), None)
        .await
        .unwrap();
    let reconciled = plane.reconcile(&Principal::system()).await.unwrap();
    assert_eq!(reconciled.marked_error, 1, "{reconciled:?}");
    assert_eq!(reconciled.marked_destroyed, 0, "{reconciled:?}");
    let record = fx.store.get_sandbox(&stopped.id).await.unwrap().unwrap();
    assert_eq!(record.state, SandboxState::Error);
    assert_eq!(record.state_reason, Some(StateReason::ProviderFailed));
    assert_eq!(
        record.state_message.as_deref(),
        Some("the runtime stopped on provider mock")
    );
    assert_eq!(
        fx.runtimes(),
        vec![kept.id.to_string()],
        "the stopped runtime is removed, a running one kept"
    );
    let lease = fx
        .store
        .get_lease(stopped.id.as_str())
        .await
        .unwrap()
        .unwrap();
    assert!(!lease.active_at(fx.clock.now()), "the lease lapsed");
    let mut seen = Vec::new();
    while let Ok(Some(event)) =
        tokio::time::timeout(Duration::from_millis(200), events.next()).await
    {
        seen.push(event);
    }
    let types: Vec<_> = seen.iter().map(|e| e.event_type).collect();
    assert_eq!(
        types,
        [EventType::ReconcileAction, EventType::SandboxError],
        "{seen:?}"
    );
    for event in &seen {
        assert_eq!(
            event.tenant_id.as_deref(),
            Some(stopped.tenant_id.as_str()),
            "published in the sandbox's tenant, so its subscribers see it: {event:?}"
        );
    }
    let action = seen[0].data.clone().unwrap();
    assert_eq!(action["action"], "marked_error");
    let error = seen[1].data.clone().unwrap();
    assert_eq!(seen[1].sandbox_id.as_ref(), Some(&stopped.id));
    assert_eq!(error["reason"], "provider_failed");
    assert_eq!(error["message"], "the runtime stopped on provider mock");
    // Operations on it say why it is gone.
    let refusal = plane
        .check_exec_target(&fx.admin(), &stopped.id)
        .await
        .unwrap_err();
    assert_eq!(refusal.kind(), ErrorKind::Conflict);
    assert_eq!(
        refusal.to_string(),
        format!(
            "sandbox {} has failed: provider_failed (the runtime stopped on provider mock)",
            stopped.id
        )
    );
    // The next pass has nothing left to do.
    let again = plane.reconcile(&Principal::system()).await.unwrap();
    assert_eq!(again, svc_control::ReconcileReport::default());
}

#[tokio::test]
async fn a_caller_that_goes_away_mid_spawn_leaves_a_consistent_sandbox() {
    // The caller goes away once the spawn has reached the provider (not after a fixed time,
    // which a busy machine may spend before the spawn gets that far).
    let fx = Fixture::with(|c| {
        c.defaults.spawn_timeout = svc_core::GoDuration::from_secs(60);
    })
    .await;
    fx.provider
        .set_spawn(SpawnFault::Slow(Duration::from_millis(150)));
    let caller = fx.spawn_in_background();
    fx.wait_for("the spawn to reach the provider", || async {
        fx.provider.spawns_started.load(Ordering::SeqCst) >= 1
    })
    .await;
    caller.abort();
    assert!(
        caller.await.unwrap_err().is_cancelled(),
        "the caller gave up first"
    );
    fx.wait_for_first_record("the abandoned spawn to finish", SandboxState::Running)
        .await;
    let record = fx.records().await.remove(0);
    assert_eq!(fx.runtimes(), vec![record.id.to_string()]);

    // Gone while the admitting write is in flight: the write lands, and the spawn goes on.
    let fx = Fixture::new().await;
    *fx.store.admit_delay.lock().unwrap() = Some(Duration::from_millis(100));
    let caller = fx.spawn_in_background();
    fx.wait_for("the admitting write to begin", || async {
        fx.store.admits_started.load(Ordering::SeqCst) >= 1
    })
    .await;
    caller.abort();
    assert!(caller.await.unwrap_err().is_cancelled());
    fx.wait_for_first_record(
        "the spawn admitted after its caller left",
        SandboxState::Running,
    )
    .await;
    assert_eq!(fx.runtimes().len(), 1);

    // The same, when the provider then fails: the record ends, nothing runs.
    let fx = Fixture::new().await;
    fx.provider.set_spawn(SpawnFault::Hang);
    let caller = fx.spawn_in_background();
    fx.wait_for("the spawn to reach the provider", || async {
        fx.provider.spawns_started.load(Ordering::SeqCst) >= 1
    })
    .await;
    caller.abort();
    fx.wait_for_first_record("the abandoned spawn to be rolled back", SandboxState::Error)
        .await;
    assert!(fx.runtimes().is_empty());
}

#[tokio::test]
async fn recovery_resolves_records_a_crash_left_creating() {
    let fx = Fixture::new().await;
    // A record shaped by a real spawn, then destroyed: the template for the crash's leftovers.
    let shape = fx.spawn().await.unwrap();
    fx.plane
        .destroy_sandbox(&fx.admin(), &shape.id)
        .await
        .unwrap();
    let interrupted = |worker: &str| Sandbox {
        id: SandboxId::generate(),
        state: SandboxState::Creating,
        worker_id: Some(worker.into()),
        ..shape.clone()
    };
    // Three spawns a crash interrupted between the record and `running`, and one of another
    // worker's, which is not this worker's to settle.
    let with_runtime = interrupted("local");
    let without_runtime = interrupted("local");
    let half_made = interrupted("local");
    let foreign = interrupted("elsewhere");
    for record in [&with_runtime, &without_runtime, &half_made, &foreign] {
        fx.store.insert_sandbox(record).await.unwrap();
    }
    fx.provider.spawn(&spec(&with_runtime.id)).await.unwrap();
    // A runtime directory the provider would not call running: a file in its place.
    std::fs::write(fx.dir.path().join("mock").join(half_made.id.as_str()), b"x").unwrap();

    let restarted = fx.restarted(false);
    let mut events = restarted
        .subscribe_events(&fx.admin(), Default::default(), None)
        .await
        .unwrap();
    let report = restarted
        .recover_interrupted_spawns(&Principal::system())
        .await
        .unwrap();
    assert_eq!(
        (
            report.found,
            report.resumed,
            report.failed,
            report.unresolved
        ),
        (3, 1, 2, 0),
        "{report:?}"
    );
    let state_of = |id: SandboxId| {
        let store = Arc::clone(&fx.store);
        async move { store.get_sandbox(&id).await.unwrap().unwrap() }
    };
    assert_eq!(
        state_of(with_runtime.id.clone()).await.state,
        SandboxState::Running
    );
    for id in [&without_runtime.id, &half_made.id] {
        let record = state_of(id.clone()).await;
        assert_eq!(record.state, SandboxState::Error);
        assert_eq!(record.state_reason, Some(StateReason::SpawnFailed));
    }
    assert_eq!(
        state_of(foreign.id.clone()).await.state,
        SandboxState::Creating
    );
    let types = drain(&mut events).await;
    assert_eq!(
        types
            .iter()
            .filter(|t| **t == EventType::SandboxError)
            .count(),
        2
    );
    assert!(types.contains(&EventType::SandboxRunning));
    assert_eq!(fx.runtimes(), vec![with_runtime.id.to_string()]);
    assert!(
        !fx.dir
            .path()
            .join("mock")
            .join(half_made.id.as_str())
            .exists(),
        "the leftover was removed"
    );
}

fn spec(id: &SandboxId) -> SpawnSpec {
    SpawnSpec {
        id: id.clone(),
        image: "alpine".into(),
        memory_mb: 64,
        vcpus: 1,
        env: Default::default(),
        network: None,
        labels: Default::default(),
        multi_user: false,
        egress: svc_core::egress::Egress::default(),
        progress: Default::default(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_spawns_never_exceed_a_small_capacity() {
    let fx = Arc::new(
        Fixture::with(|c| {
            c.defaults.max_sandboxes = 3;
        })
        .await,
    );
    let spawns = (0..40).map(|_| {
        let fx = Arc::clone(&fx);
        tokio::spawn(async move { fx.spawn().await })
    });
    let results = futures::future::join_all(spawns).await;
    let (ok, denied): (Vec<_>, Vec<_>) = results
        .into_iter()
        .map(Result::unwrap)
        .partition(Result::is_ok);
    assert_eq!(ok.len(), 3);
    assert!(denied
        .iter()
        .all(|r| r.as_ref().unwrap_err().kind() == ErrorKind::ResourceLimit));
    assert_eq!(fx.runtimes().len(), 3);

    let fx = Arc::new(
        Fixture::with(|c| {
            c.defaults.max_sandboxes_per_owner = 2;
        })
        .await,
    );
    let spawns = (0..30).map(|i| {
        let fx = Arc::clone(&fx);
        tokio::spawn(async move {
            let owner = format!("owner{}", i % 3);
            let principal = Principal::anonymous(Some(svc_core::OwnerId::parse(&owner).unwrap()));
            fx.plane
                .spawn_sandbox(&principal, request())
                .await
                .map(|s| s.owner_id)
        })
    });
    let owners: Vec<Option<svc_core::OwnerId>> = futures::future::join_all(spawns)
        .await
        .into_iter()
        .filter_map(|r| r.unwrap().ok())
        .collect();
    assert_eq!(owners.len(), 6, "two for each of three owners");
    assert_eq!(owners.iter().collect::<HashSet<_>>().len(), 3);
}

#[tokio::test]
async fn every_call_is_checked_against_the_permission_table() {
    let fx = Fixture::new().await;
    let sandbox = fx.spawn().await.unwrap();
    let id = &sandbox.id;
    let viewer = Principal {
        role: Role::Viewer,
        ..Principal::anonymous(None)
    };
    assert!(fx.plane.get_sandbox(&viewer, id).await.is_ok());
    assert!(fx
        .plane
        .list_sandboxes(&viewer, ListSandboxes::default())
        .await
        .is_ok());
    assert!(fx
        .plane
        .list_templates(&viewer, Default::default())
        .await
        .is_ok());
    let allowed = [
        fx.plane.sandbox_logs(&viewer, id, 10).await.map(drop),
        fx.plane.snapshots(&viewer).await.map(drop),
        fx.plane.provider_detail(&viewer, "mock").await.map(drop),
        fx.plane.list_files(&viewer, id, "/").await.map(drop),
    ];
    for result in allowed {
        assert!(
            !matches!(&result, Err(e) if e.kind() == ErrorKind::Forbidden),
            "{result:?}"
        );
    }
    let exec = svc_control::ExecCommand {
        command: "touch /tmp/nope".into(),
        ..Default::default()
    };
    let template = svc_core::template::TemplateSpec {
        name: Some("t".into()),
        ..Default::default()
    };
    let forbidden = [
        fx.plane.exec_buffered(&viewer, id, exec).await.map(drop),
        fx.plane
            .write_file(&viewer, id, "/x", "x", None, None)
            .await,
        fx.plane.delete_file(&viewer, id, "/x", false).await,
        fx.plane.move_file(&viewer, id, "/x", "/y").await,
        fx.plane.chmod_file(&viewer, id, "/x", "644").await,
        fx.plane
            .extend_sandbox(
                &viewer,
                id,
                svc_core::sandbox::ExtendRequest {
                    ttl: svc_core::GoDuration::from_secs(60),
                },
            )
            .await
            .map(drop),
        fx.plane
            .create_template(&viewer, template.clone())
            .await
            .map(drop),
        fx.plane
            .update_template(&viewer, "t", template)
            .await
            .map(drop),
        fx.plane
            .spawn_from_template(&viewer, "t", Default::default())
            .await
            .map(drop),
        fx.plane.spawn_sandbox(&viewer, request()).await.map(drop),
        fx.plane.destroy_sandbox(&viewer, id).await,
        fx.plane.prune_expired(&viewer).await.map(drop),
        fx.plane.test_providers(&viewer).await.map(drop),
        fx.plane.check_exec_target(&viewer, id).await,
        fx.plane
            .delete_template(&viewer, "anything")
            .await
            .map(drop),
        fx.plane.authorize(&viewer, Action::UseAdminRoutes),
    ];
    for result in forbidden {
        assert_eq!(result.unwrap_err().kind(), ErrorKind::Forbidden);
    }
    assert_eq!(
        fx.records().await[0].state,
        SandboxState::Running,
        "nothing changed"
    );
}

#[tokio::test]
async fn a_provider_disabled_for_spawns_still_destroys_and_reaps() {
    let fx = Fixture::new().await;
    let kept = fx.spawn().await.unwrap();
    let expiring = fx
        .plane
        .spawn_sandbox(
            &fx.admin(),
            SpawnRequest {
                ttl: Some(svc_core::GoDuration::from_secs(60)),
                ..request()
            },
        )
        .await
        .unwrap();
    let restarted = fx.restarted(true);
    let err = restarted
        .spawn_sandbox(
            &fx.admin(),
            SpawnRequest {
                provider: Some("mock".into()),
                ..request()
            },
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::BadRequest, "{err}");
    restarted
        .destroy_sandbox(&fx.admin(), &kept.id)
        .await
        .unwrap();
    fx.clock.advance(Duration::from_secs(120));
    assert_eq!(restarted.prune_expired(&fx.admin()).await.unwrap(), 1);
    assert!(fx.runtimes().is_empty());
    let states: Vec<_> = fx
        .records()
        .await
        .into_iter()
        .map(|r| r.state_reason)
        .collect();
    assert!(states.contains(&Some(StateReason::DestroyedByRequest)));
    assert!(states.contains(&Some(StateReason::Pruned)));
    let _ = expiring;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spawn_that_fails_frees_its_place_for_a_queued_one() {
    let fx = Fixture::with(|c| {
        c.defaults.max_sandboxes = 1;
        c.defaults.spawn_overflow = svc_core::config::SpawnOverflow::Queue;
        c.defaults.spawn_timeout = svc_core::GoDuration::from_secs(60);
    })
    .await;
    let mut events = fx.events();
    // The first spawn fails when the test says, once the second waits in the queue: not when a
    // timeout happens to fire.
    fx.provider.set_spawn(SpawnFault::FailWhenReleased);
    let failing = fx.spawn_in_background();
    fx.wait_for_first_record("the hanging spawn's record", SandboxState::Creating)
        .await;
    let queued = fx.spawn_in_background();
    fx.wait_for("the second spawn to queue", || async {
        fx.queue_depth().await == 1
    })
    .await;
    fx.provider.set_spawn(SpawnFault::None);
    fx.provider.release();
    // The first spawn fails and rolls back; its end wakes the queue.
    assert!(failing.await.unwrap().is_err());
    let sandbox = tokio::time::timeout(Duration::from_secs(60), queued)
        .await
        .expect("the queued spawn was woken by the rollback")
        .unwrap()
        .unwrap();
    assert_eq!(sandbox.state, SandboxState::Running);
    let scheduler = fx.plane.scheduler_stats().await.unwrap();
    let keys: Vec<String> = serde_json::to_value(&scheduler)
        .unwrap()
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    let mut expected = [
        "spawn_overflow",
        "spawn_queue_depth",
        "max_spawn_queue",
        "spawn_queue_timeout",
        "admission_control",
        "spawn_queued_total",
        "spawn_dequeued_total",
        "spawn_queue_timeouts",
        "spawn_queue_wait_count",
        "spawn_queue_wait_total",
        "spawn_queue_wait_max",
        "spawn_queue_wait_avg",
        "spawn_queue_wait_total_ms",
        "spawn_queue_wait_max_ms",
        "spawn_queue_wait_avg_ms",
        "worker_id",
        "selected_worker_id",
        "eligible_workers",
    ];
    expected.sort_unstable();
    let mut keys = keys;
    keys.sort();
    assert_eq!(keys, expected, "interface.md's scheduler object");
    assert_eq!(scheduler.admission_control, "worker_aware_local");
    assert_eq!(
        (
            scheduler.worker_id.as_str(),
            scheduler.selected_worker_id.as_str(),
            scheduler.eligible_workers
        ),
        ("local", "local", 1)
    );
    let stats = scheduler.queue;
    assert_eq!(
        (
            stats.spawn_queued_total,
            stats.spawn_dequeued_total,
            stats.spawn_queue_wait_count,
            stats.spawn_queue_depth
        ),
        (1, 1, 1, 0)
    );
    // Measured in nanoseconds: a wait under a millisecond still counts (its `_ms` reads 0).
    assert!(!stats.spawn_queue_wait_max.is_zero(), "{stats:?}");
    let types = drain(&mut events).await;
    assert!(types.contains(&EventType::SpawnQueued), "{types:?}");
    assert!(types.contains(&EventType::SpawnDequeued), "{types:?}");
}

#[tokio::test]
async fn a_caller_that_goes_away_while_queued_leaves_the_queue_and_spawns_nothing() {
    let fx = Fixture::with(|c| {
        c.defaults.max_sandboxes = 1;
        c.defaults.spawn_overflow = svc_core::config::SpawnOverflow::Queue;
    })
    .await;
    let holder = fx.spawn().await.unwrap();
    let queued = fx.spawn_in_background();
    fx.wait_for("the spawn to queue", || async {
        fx.queue_depth().await == 1
    })
    .await;
    queued.abort();
    fx.wait_for("the queue to empty", || async {
        fx.queue_depth().await == 0
    })
    .await;
    fx.plane
        .destroy_sandbox(&fx.admin(), &holder.id)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        fx.records().await.len(),
        1,
        "only the holder was ever recorded"
    );
    assert!(fx.runtimes().is_empty());
}

#[tokio::test]
async fn a_dead_workers_sandboxes_are_taken_over_or_ended_once() {
    let fx = Fixture::new().await;
    let old = fx.as_worker("old");
    old.register_local_worker().await.unwrap();
    let admin = fx.admin();
    let spawn = || old.spawn_sandbox(&admin, SpawnRequest::default());
    let (kept, lost) = (spawn().await.unwrap(), spawn().await.unwrap());
    let frozen = spawn().await.unwrap();
    old.pause_sandbox(&admin, &frozen.id).await.unwrap();
    // A spawn the dead worker never finished, and a runtime gone with it.
    let mut interrupted = kept.clone();
    interrupted.id = SandboxId::generate();
    interrupted.state = SandboxState::Creating;
    fx.store.insert_sandbox(&interrupted).await.unwrap();
    fx.provider.destroy(&lost.id).await.unwrap();
    let new = fx.as_worker("new");
    new.register_local_worker().await.unwrap();
    let system = Principal::system();
    assert_eq!(
        new.take_over_dead_workers(&system).await.unwrap(),
        svc_control::ReconcileReport::default(),
        "a live worker's sandboxes are left alone"
    );
    // The old worker stops beating: past its staleness window and its leases.
    fx.clock.advance(Duration::from_secs(120));
    new.register_local_worker().await.unwrap();
    let mut events = new
        .subscribe_events(&fx.admin(), svc_control::EventFilter::default(), None)
        .await
        .unwrap();
    let report = new.take_over_dead_workers(&system).await.unwrap();
    assert_eq!(
        (report.taken_over, report.marked_destroyed),
        (2, 1),
        "{report:?}"
    );
    let record = |id: SandboxId| {
        let store = Arc::clone(&fx.store);
        async move { store.get_sandbox(&id).await.unwrap().unwrap() }
    };
    let taken = record(kept.id.clone()).await;
    assert_eq!(taken.state, SandboxState::Running);
    assert_eq!(taken.worker_id.as_deref(), Some("new"));
    let lease = fx.store.get_lease(kept.id.as_str()).await.unwrap().unwrap();
    assert_eq!(lease.holder_id, "new");
    assert!(lease.active_at(fx.clock.now()));
    let paused = record(frozen.id.clone()).await;
    assert_eq!(paused.state, SandboxState::Paused, "taken over as it was");
    assert_eq!(paused.worker_id.as_deref(), Some("new"));
    let resumed = new.resume_sandbox(&admin, &frozen.id).await.unwrap();
    assert_eq!(resumed.state, SandboxState::Running);
    let vanished = record(lost.id.clone()).await;
    assert_eq!(vanished.state, SandboxState::Destroyed);
    assert_eq!(vanished.state_reason, Some(StateReason::RuntimeVanished));
    let failed = record(interrupted.id.clone()).await;
    assert_eq!(failed.state, SandboxState::Error);
    assert_eq!(failed.state_reason, Some(StateReason::SpawnFailed));
    let mut actions = Vec::new();
    while let Ok(Some(event)) =
        tokio::time::timeout(Duration::from_millis(200), events.next()).await
    {
        if event.event_type == EventType::ReconcileAction {
            actions.push((
                event.sandbox_id.clone().unwrap(),
                event.data.clone().unwrap()["action"].clone(),
            ));
        }
    }
    actions.sort_by(|a, b| a.0.as_str().cmp(b.0.as_str()));
    let mut expected = vec![
        (kept.id.clone(), serde_json::json!("taken_over")),
        (frozen.id.clone(), serde_json::json!("taken_over")),
        (lost.id.clone(), serde_json::json!("marked_destroyed")),
    ];
    expected.sort_by(|a, b| a.0.as_str().cmp(b.0.as_str()));
    assert_eq!(actions, expected);
    // Settled once: a third worker finds nothing left, and the kept runtime still runs.
    let third = fx.as_worker("third");
    third.register_local_worker().await.unwrap();
    assert_eq!(
        third.take_over_dead_workers(&system).await.unwrap(),
        svc_control::ReconcileReport::default()
    );
    let mut alive = vec![kept.id.to_string(), frozen.id.to_string()];
    alive.sort();
    assert_eq!(fx.runtimes(), alive);
}

/// A refused control of a running exec (resizing a command that has no terminal) is the
/// caller's 400 through the one classification of provider failures, as for any other call on
/// the sandbox, not a 500 from the backend.
#[tokio::test]
async fn a_refused_exec_control_is_the_callers_error() {
    let fx = Fixture::new().await;
    let sandbox = fx.spawn().await.unwrap();
    let admin = fx.admin();
    let id = &sandbox.id;
    let exec_id = fx
        .plane
        .exec_background(
            &admin,
            id,
            svc_control::ExecCommand {
                command: "sleep 300".into(),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let exec_id = &exec_id;
    let resized = fx
        .plane
        .resize_exec(
            &admin,
            id,
            exec_id,
            svc_control::TtySize {
                cols: 100,
                rows: 40,
            },
        )
        .await
        .unwrap_err();
    assert_eq!(resized.kind(), ErrorKind::BadRequest, "{resized}");
    fx.plane.kill_exec(&admin, id, exec_id).await.unwrap();
}

/// A caller that proved itself with one sandbox's access token (the E2B listener's in-sandbox
/// calls) reaches that sandbox only, and only as a call inside it would: another sandbox is
/// not found, listings are empty, lifecycle and admin actions are forbidden.
#[tokio::test]
async fn a_caller_scoped_to_one_sandbox_reaches_no_other() {
    let fx = Fixture::new().await;
    let own = fx.spawn().await.unwrap();
    let other = fx.spawn().await.unwrap();
    let token = fx.plane.sandbox_access_token(&own.id).await.unwrap();
    let scoped = fx
        .plane
        .verify_sandbox_access_token(&token, &own.id)
        .await
        .unwrap();
    let true_ = || svc_control::ExecCommand {
        command: "true".into(),
        ..Default::default()
    };
    let ran = fx
        .plane
        .exec_buffered(&scoped, &own.id, true_())
        .await
        .unwrap();
    assert_eq!(ran.exit_code, 0);
    assert!(fx.plane.get_sandbox(&scoped, &own.id).await.is_ok());
    for refused in [
        fx.plane
            .exec_buffered(&scoped, &other.id, true_())
            .await
            .map(drop),
        fx.plane.get_sandbox(&scoped, &other.id).await.map(drop),
    ] {
        assert_eq!(refused.unwrap_err().kind(), ErrorKind::NotFound);
    }
    assert!(fx
        .plane
        .list_sandboxes(&scoped, ListSandboxes::default())
        .await
        .unwrap()
        .is_empty());
    for forbidden in [
        fx.plane.spawn_sandbox(&scoped, request()).await.map(drop),
        fx.plane.destroy_sandbox(&scoped, &own.id).await,
        fx.plane.authorize(&scoped, Action::UseAdminRoutes),
    ] {
        assert_eq!(forbidden.unwrap_err().kind(), ErrorKind::Forbidden);
    }
    let wrong = fx
        .plane
        .verify_sandbox_access_token(&token, &other.id)
        .await
        .unwrap_err();
    assert_eq!(wrong.kind(), ErrorKind::Unauthorized);
}
