//! The demo's own tokio runtime, on its own thread, whose threads all log to a file.
//!
//! The CLI installs a global tracing subscriber that writes to standard error; the
//! daemon, the simulation and the mock servers would scatter their logs through the
//! story. Every thread of this runtime (workers, blocking pool, and the thread that
//! drives it) makes the file's subscriber its default instead, so their logs go to
//! the file named in the demo's header, and the terminal shows only the story.

use std::cell::RefCell;
use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, anyhow};
use tracing::Dispatch;
use tracing::dispatcher::DefaultGuard;
use tracing_subscriber::EnvFilter;

thread_local! {
    static LOG_GUARD: RefCell<Option<DefaultGuard>> = const { RefCell::new(None) };
}

/// A subscriber writing plain text at `info` to a new file at `path`.
pub fn file_logger(path: &Path) -> anyhow::Result<Dispatch> {
    let file = std::fs::File::create(path)
        .with_context(|| format!("cannot create the demo's log file {}", path.display()))?;
    let subscriber = tracing_subscriber::fmt()
        .with_writer(Arc::new(file))
        .with_ansi(false)
        .with_env_filter(EnvFilter::new("info"))
        .finish();
    Ok(Dispatch::new(subscriber))
}

/// Runs the future `work` makes on a new two-thread runtime on a new thread, every
/// thread of it logging to `log`; waits for it without blocking the caller's runtime.
pub async fn run_isolated<F, Fut>(log: Dispatch, work: F) -> anyhow::Result<u8>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = u8>,
{
    let (tx, rx) = tokio::sync::oneshot::channel();
    let thread = std::thread::Builder::new()
        .name("nodefence-demo".into())
        .spawn(move || {
            let _default = tracing::dispatcher::set_default(&log);
            let for_threads = log.clone();
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_name("nodefence-demo-worker")
                .enable_all()
                .on_thread_start(move || {
                    let guard = tracing::dispatcher::set_default(&for_threads);
                    LOG_GUARD.with(|g| *g.borrow_mut() = Some(guard));
                })
                .on_thread_stop(|| LOG_GUARD.with(|g| drop(g.borrow_mut().take())))
                .build();
            let result = runtime.map(|rt| {
                let code = rt.block_on(work());
                rt.shutdown_timeout(Duration::from_secs(5));
                code
            });
            let _ = tx.send(result);
        })
        .context("cannot start the demo's thread")?;
    let result = rx.await;
    let _ = tokio::task::spawn_blocking(move || thread.join()).await;
    match result {
        Ok(Ok(code)) => Ok(code),
        Ok(Err(e)) => Err(anyhow!("cannot start the demo's async runtime: {e}")),
        Err(_) => Err(anyhow!("the demo stopped unexpectedly (see its log file)")),
    }
}
