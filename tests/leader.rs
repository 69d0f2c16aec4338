//! Leader election against the fake API server over real HTTP: one leader at a time,
//! hand-over on release, fail-stop when the API server is gone.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::Ordering;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kube::config::{KubeConfigOptions, Kubeconfig};
use nodefence::cluster::leader::{LeaderElector, LeaderTimings, Leadership};
use nodefence_mocks::kube::{FakeKube, FakeKubeHandle};
use tokio::time::Instant;

fn timings() -> LeaderTimings {
    LeaderTimings {
        lease_duration: Duration::from_millis(1500),
        renew_deadline: Duration::from_millis(1000),
        retry_period: Duration::from_millis(150),
    }
}

async fn server() -> FakeKubeHandle {
    nodefence::tls::install_crypto_provider();
    FakeKube::builder().start().await.expect("fake-kube starts")
}

async fn leases(kube: &FakeKubeHandle) -> Api<Lease> {
    let kubeconfig = Kubeconfig::from_yaml(&kube.kubeconfig_yaml()).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap();
    Api::namespaced(kube::Client::try_from(config).unwrap(), "kube-system")
}

async fn eventually(what: &str, within: Duration, mut cond: impl FnMut() -> bool) {
    let end = Instant::now() + within;
    while Instant::now() < end {
        if cond() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("timed out waiting for: {what}");
}

fn start(
    api: Api<Lease>,
    identity: &str,
) -> (
    Leadership,
    std::sync::Arc<std::sync::atomic::AtomicBool>,
    tokio::task::JoinHandle<()>,
) {
    let (elector, leadership) = LeaderElector::new(api, "nodefence", identity, timings());
    let stop = elector.stopper();
    (leadership, stop, tokio::spawn(elector.run()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leader_at_a_time_and_a_fast_hand_over_on_release() {
    let kube = server().await;
    let (a, stop_a, task_a) = start(leases(&kube).await, "replica-a");
    eventually("a leads", Duration::from_secs(5), || a.is_leader()).await;
    let (b, stop_b, task_b) = start(leases(&kube).await, "replica-b");

    // Three lease durations: never both, and a keeps it.
    let end = Instant::now() + Duration::from_millis(4500);
    while Instant::now() < end {
        assert!(!(a.is_leader() && b.is_leader()), "two leaders at once");
        assert!(a.is_leader(), "a renews and keeps the lease");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }

    // SIGTERM-like stop: a releases; b takes over well before the lease would expire.
    stop_a.store(true, Ordering::SeqCst);
    let released = Instant::now();
    task_a.await.unwrap();
    assert!(!a.is_leader());
    eventually("b leads", Duration::from_secs(5), || b.is_leader()).await;
    assert!(
        released.elapsed() < timings().lease_duration,
        "hand-over did not wait for expiry"
    );
    let lease = leases(&kube).await.get("nodefence").await.unwrap();
    let spec = lease.spec.unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some("replica-b"));
    assert_eq!(spec.lease_transitions, Some(1));

    stop_b.store(true, Ordering::SeqCst);
    task_b.await.unwrap();
    kube.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_cannot_renew_stops_acting_within_the_renew_deadline() {
    let kube = server().await;
    let (a, _stop, _task) = start(leases(&kube).await, "replica-a");
    eventually("a leads", Duration::from_secs(5), || a.is_leader()).await;
    let cut = Instant::now();
    kube.shutdown().await;
    eventually("a stops leading", Duration::from_secs(5), || !a.is_leader()).await;
    assert!(
        cut.elapsed() <= timings().renew_deadline + timings().retry_period * 2,
        "fail-stop took {:?}",
        cut.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_leader_is_replaced_after_the_lease_duration_not_before() {
    let kube = server().await;
    let (a, _stop_a, task_a) = start(leases(&kube).await, "replica-a");
    eventually("a leads", Duration::from_secs(5), || a.is_leader()).await;
    task_a.abort(); // crash: no release
    let crashed = Instant::now();
    let (b, stop_b, task_b) = start(leases(&kube).await, "replica-b");
    eventually("b leads", Duration::from_secs(6), || b.is_leader()).await;
    assert!(
        crashed.elapsed() >= timings().lease_duration - Duration::from_millis(200),
        "b took over after {:?}, before the lease could expire",
        crashed.elapsed()
    );
    stop_b.store(true, Ordering::SeqCst);
    task_b.await.unwrap();
    kube.shutdown().await;
}

/// The same replica winning the Lease back after another held it is a new term: what
/// the first term dispatched no longer leads (seed 4252), what the second takes does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_won_back_is_a_new_term_and_the_last_terms_actions_stop() {
    let kube = server().await;
    let api = leases(&kube).await;
    let (a, stop_a, task_a) = start(api.clone(), "replica-a");
    eventually("a leads", Duration::from_secs(5), || a.is_leader()).await;
    let (_first_scope, first) = a.this_term();
    assert!(first.is_leader());
    // Another replica takes the Lease over (as after a partition): a sees it held.
    let mut lease = api.get("nodefence").await.unwrap();
    let spec = lease.spec.as_mut().unwrap();
    spec.holder_identity = Some("replica-b".into());
    api.replace("nodefence", &Default::default(), &lease)
        .await
        .unwrap();
    eventually("a stops leading", Duration::from_secs(5), || !a.is_leader()).await;
    // Nobody renews it for replica-b: a takes it back once it expired.
    eventually("a leads again", Duration::from_secs(6), || a.is_leader()).await;
    assert!(
        !first.is_leader(),
        "the first term's view must not lead in the second"
    );
    let (_second_scope, second) = a.this_term();
    assert!(second.is_leader());
    stop_a.store(true, Ordering::SeqCst);
    task_a.await.unwrap();
    kube.shutdown().await;
}

/// Issue 52, item 5: every term is named by the resourceVersion of the Lease write
/// that began it, the same for every replica and only growing: a new holder's is
/// larger, and so is one taken from a Lease deleted and made again (whose
/// `leaseTransitions` starts over at 0).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_term_is_named_by_a_token_that_only_grows() {
    let kube = server().await;
    let api = leases(&kube).await;
    let (a, stop_a, run_a) = start(api.clone(), "replica-a");
    eventually("a leads", Duration::from_secs(5), || a.is_leader()).await;
    let first = a.fencing_token().unwrap();
    let lease = api.get("nodefence").await.unwrap();
    let written: u64 = lease.metadata.resource_version.unwrap().parse().unwrap();
    assert!(
        first <= written,
        "the token is the acquiring write's: {first} > {written}"
    );
    // Renewals keep the term and its token.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(a.fencing_token(), Some(first));
    // b takes over once a gives the Lease up.
    let (b, stop_b, run_b) = start(api.clone(), "replica-b");
    stop_a.store(true, Ordering::SeqCst);
    run_a.await.unwrap();
    eventually("b leads", Duration::from_secs(10), || b.is_leader()).await;
    let second = b.fencing_token().unwrap();
    assert!(second > first, "{second} after {first}");
    assert_eq!(a.fencing_token(), None, "a no longer leads");
    // The Lease deleted and made again: transitions start over, the token does not.
    stop_b.store(true, Ordering::SeqCst);
    run_b.await.unwrap();
    api.delete("nodefence", &Default::default()).await.unwrap();
    let (c, stop_c, run_c) = start(api.clone(), "replica-c");
    eventually("c leads", Duration::from_secs(10), || c.is_leader()).await;
    let recreated = api.get("nodefence").await.unwrap();
    assert_eq!(
        recreated.spec.and_then(|s| s.lease_transitions),
        Some(0),
        "a new Lease"
    );
    assert!(c.fencing_token().unwrap() > second);
    stop_c.store(true, Ordering::SeqCst);
    run_c.await.unwrap();
    kube.shutdown().await;
}
