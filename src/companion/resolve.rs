//! Name lookups off the feeding path: the replicas' and the peers' Services, each
//! looked up again every 30 s by a task of its own ([`follow`]), each lookup bounded
//! by [`LOOKUP_TIMEOUT`]; what the others read is the last list found, which a lookup
//! that fails, finds nothing or hangs never replaces. In a pod (`ndots:5`, three search
//! domains, glibc) one lookup against a cluster DNS that stopped answering lasts tens
//! of seconds; nothing waits on it but the next lookup.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use tokio_util::task::AbortOnDropHandle;

/// The longest one lookup is waited for; the last list found stays meanwhile.
pub const LOOKUP_TIMEOUT: Duration = Duration::from_secs(10);

/// One lookup of a host and port.
type Lookup =
    dyn Fn(String, u16) -> BoxFuture<'static, std::io::Result<Vec<SocketAddr>>> + Send + Sync;

/// How names become addresses: the system's resolver (glibc's `getaddrinfo`, as
/// `tokio::net::lookup_host` calls it), or another (tests: one that never answers).
#[derive(Clone)]
pub struct Resolver(Arc<Lookup>);

impl std::fmt::Debug for Resolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Resolver")
    }
}

impl Default for Resolver {
    fn default() -> Self {
        Self::system()
    }
}

impl Resolver {
    /// The system's resolver.
    pub fn system() -> Self {
        Self::new(|host, port| {
            Box::pin(async move {
                tokio::net::lookup_host((host.as_str(), port))
                    .await
                    .map(|found| found.collect())
            })
        })
    }

    /// Another resolver.
    pub fn new(
        lookup: impl Fn(String, u16) -> BoxFuture<'static, std::io::Result<Vec<SocketAddr>>>
        + Send
        + Sync
        + 'static,
    ) -> Self {
        Self(Arc::new(lookup))
    }

    /// `host:port` looked up, each address once, in order; an error, or no answer
    /// within `timeout`, says why.
    pub async fn lookup(
        &self,
        host: &str,
        port: u16,
        timeout: Duration,
    ) -> Result<Vec<SocketAddr>, String> {
        match tokio::time::timeout(timeout, (self.0)(host.to_string(), port)).await {
            Err(_) => Err(format!(
                "no answer within {}",
                humantime::format_duration(timeout)
            )),
            Ok(Err(e)) => Err(e.to_string()),
            Ok(Ok(mut found)) => {
                found.sort();
                found.dedup();
                Ok(found)
            }
        }
    }
}

/// Follows `host:port`: looked up now and every `every` by a task of its own, each
/// lookup bounded by `timeout`; the receiver holds the last non-empty list found
/// (empty until one is), and changes only when a lookup finds another. `what` names
/// it in the logs. The task ends when the handle is dropped.
pub fn follow(
    resolver: Resolver,
    host: String,
    port: u16,
    every: Duration,
    timeout: Duration,
    what: &'static str,
) -> (
    tokio::sync::watch::Receiver<Vec<SocketAddr>>,
    AbortOnDropHandle<()>,
) {
    let (tx, rx) = tokio::sync::watch::channel(Vec::new());
    let task = tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut failing = false;
        loop {
            tick.tick().await;
            match resolver.lookup(&host, port, timeout).await {
                Ok(found) if !found.is_empty() => {
                    if failing {
                        tracing::info!(%host, what, "the name is looked up again");
                        failing = false;
                    }
                    tx.send_if_modified(|known| {
                        let changed = *known != found;
                        if changed {
                            *known = found;
                        }
                        changed
                    });
                }
                Ok(_) | Err(_) if failing => {}
                Ok(_) => {
                    failing = true;
                    tracing::warn!(%host, what, "the name has no address; keeping the last list");
                }
                Err(why) => {
                    failing = true;
                    tracing::warn!(%host, what, %why, "cannot look the name up; keeping the last list");
                }
            }
        }
    });
    (rx, AbortOnDropHandle::new(task))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(last: u8) -> SocketAddr {
        SocketAddr::from(([10, 0, 0, last], 9440))
    }

    #[tokio::test(start_paused = true)]
    async fn a_lookup_that_hangs_or_fails_keeps_the_last_list() {
        // Answers twice, then fails, then never answers again.
        let calls = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let counted = calls.clone();
        let resolver = Resolver::new(move |_, _| {
            let n = counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Box::pin(async move {
                match n {
                    0 => Ok(vec![addr(2), addr(1), addr(2)]),
                    1 => Ok(vec![addr(3)]),
                    2 => Err(std::io::Error::other("SERVFAIL")),
                    _ => std::future::pending().await,
                }
            })
        });
        let every = Duration::from_secs(30);
        let (mut rx, _task) = follow(
            resolver,
            "nodefence-companions".into(),
            9440,
            every,
            LOOKUP_TIMEOUT,
            "replicas",
        );
        rx.changed().await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(*rx.borrow(), vec![addr(1), addr(2)], "sorted, once each");
        rx.changed().await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(*rx.borrow(), vec![addr(3)]);
        // The failure and the hangs that follow change nothing.
        tokio::time::sleep(every * 5).await;
        assert_eq!(*rx.borrow(), vec![addr(3)]);
        assert!(!rx.has_changed().unwrap_or(true));
        assert!(calls.load(std::sync::atomic::Ordering::SeqCst) >= 4);
    }

    #[tokio::test(start_paused = true)]
    async fn a_hung_lookup_is_abandoned_at_its_timeout() {
        let resolver = Resolver::new(|_, _| Box::pin(std::future::pending()));
        let e = resolver
            .lookup("peers", 9441, Duration::from_secs(10))
            .await
            .unwrap_err();
        assert_eq!(e, "no answer within 10s");
    }
}
