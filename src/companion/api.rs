//! The feeding rule's second basis: the API server's answer on the fencing mark.
//!
//! While the leader answers, the companion sends the API server nothing (5,000 nodes:
//! no load in the steady state). Once the leader has acknowledged no beat sent in the
//! last `isolation_timeout / 2` (I/2, 1 s by default), the companion reads its own
//! Node, at most once per I/2 and one read at a time: a GET without a resourceVersion,
//! so a read from etcd that returns any mark written before it was sent, of the
//! metadata only (the annotations are all it needs). An answer holds for I from when
//! the GET was *sent* ([`Feeding::api_answered`]): with one read every I/2, each
//! answered within I/2 (its timeout), the hold has no gap. A mark for this machine's
//! boot (`/proc/sys/kernel/random/boot_id`) stops feeding until the leader lifts it
//! (nothing read here does); a mark for another boot is void (the machine was already
//! reset, [`crate::watchdog::mark`]). An error, a timeout, a 403, a 429 or a 404 is no answer:
//! nothing is extended, and the watchdog runs out unless the leader or the API server
//! answers again.
//!
//! [`Feeding::api_answered`]: nodefence_watchdog::feeding::Feeding::api_answered

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;

use super::shared::Shared;
use crate::watchdog::mark::{self, Mark};

/// Where the companion reads its Node.
#[derive(Clone)]
pub struct ApiAccess {
    /// A client for the API server (in-cluster: the pod's ServiceAccount token, which
    /// may `get` nodes and nothing else).
    pub client: kube::Client,
}

/// Where Linux keeps the current boot's ID (the kubelet reports the same one as the
/// Node's `status.nodeInfo.bootID`).
pub const BOOT_ID_FILE: &str = "/proc/sys/kernel/random/boot_id";

/// Reads a boot ID file: its one line, trimmed; an empty file is an error.
pub fn read_boot_id(path: &std::path::Path) -> std::io::Result<String> {
    let text = std::fs::read_to_string(path)?;
    let id = text.trim();
    if id.is_empty() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "the boot ID file is empty",
        ));
    }
    Ok(id.to_string())
}

/// What one read of the Node said.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Answer {
    /// No mark, or one for another boot (void).
    Unmarked { void: Option<Mark> },
    /// A mark for this boot (or one that names none).
    Marked(Mark),
    /// No answer: why.
    None(String),
}

/// One metadata GET of `node`, bounded by `timeout`.
async fn read(nodes: &kube::Api<Node>, node: &str, boot_id: &str, timeout: Duration) -> Answer {
    match tokio::time::timeout(timeout, nodes.get_metadata(node)).await {
        Err(_) => Answer::None(format!(
            "no answer within {}",
            humantime::format_duration(timeout)
        )),
        Ok(Err(kube::Error::Api(status))) if status.code == 404 => {
            Answer::None(format!("the Node {node} does not exist"))
        }
        Ok(Err(e)) => Answer::None(crate::untrusted::field(&e.to_string())),
        Ok(Ok(meta)) => match mark::of_metadata(&meta.metadata) {
            Some(m) if m.applies_to(boot_id) => Answer::Marked(m),
            void => Answer::Unmarked { void },
        },
    }
}

/// Reads `node` whenever the leader is stale (see the module documentation), except
/// while the companion is marked; dropped with the companion.
/// `boot_id`: this machine's, a mark for another boot is void.
pub(super) async fn follow(
    access: ApiAccess,
    node: String,
    boot_id: String,
    shared: Arc<Shared>,
    half: Duration,
) {
    let nodes: kube::Api<Node> = kube::Api::all(access.client);
    let mut last_sent: Option<Duration> = None;
    let mut failing = false;
    let mut void_told = false;
    loop {
        if shared.feeding().marked() {
            // Nothing it reads can lift the mark: only the leader does.
            tokio::time::sleep(half).await;
            continue;
        }
        let now = shared.now();
        let stale_at = shared.leader_heard().saturating_add(half);
        let due = last_sent.map_or(stale_at, |s| stale_at.max(s.saturating_add(half)));
        if now < due {
            tokio::time::sleep(due - now).await;
            continue;
        }
        let sent_at = shared.now();
        last_sent = Some(sent_at);
        shared.status().api_reads += 1;
        let answer = read(&nodes, &node, &boot_id, half).await;
        let received = shared.now();
        match answer {
            Answer::None(why) => {
                if !failing {
                    tracing::warn!(%node, %why, "the API server gave no answer on this node's fencing mark");
                }
                tracing::debug!(%node, %why, "no answer from the API server");
                failing = true;
            }
            Answer::Unmarked { void } => {
                if failing {
                    tracing::info!(%node, "the API server answers again");
                    failing = false;
                }
                if let Some(m) = void
                    && !void_told
                {
                    tracing::info!(
                        %node,
                        marked_boot = m.boot_id.as_deref().unwrap_or_default(),
                        boot = %boot_id,
                        "the Node carries a fencing mark for another boot: void (this machine was already reset)"
                    );
                    void_told = true;
                }
                shared.feeding().api_answered(sent_at, false, received);
            }
            Answer::Marked(m) => {
                shared.feeding().api_answered(sent_at, true, received);
                shared.status().marked = true;
                tracing::warn!(
                    %node,
                    marked_boot = m.boot_id.as_deref().unwrap_or("(any)"),
                    "the API server says this node is marked for fencing: the watchdog is no longer fed"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_boot_id_is_the_files_one_line_and_an_empty_file_is_refused() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let file = dir.path().join("boot_id");
        std::fs::write(&file, "3f2a-b00t\n").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(read_boot_id(&file).ok().as_deref(), Some("3f2a-b00t"));
        std::fs::write(&file, " \n").unwrap_or_else(|e| panic!("{e}"));
        assert!(read_boot_id(&file).is_err());
        assert!(read_boot_id(&dir.path().join("absent")).is_err());
    }
}
