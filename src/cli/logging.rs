//! Logging setup: tracing to standard error, human text or JSON lines; for the
//! companion, written by a thread of its own ([`Writer::NonBlocking`]).

use clap::ValueEnum;
use tracing_subscriber::EnvFilter;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Who writes the log lines to standard error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Writer {
    /// The task that logs (the daemon and the one-shot commands).
    Blocking,
    /// A thread of its own, through a bounded queue; a full queue drops lines rather
    /// than wait (the companion: a stalled standard error, a container runtime's log
    /// pipe full, must never hold up the tasks that keep its watchdog fed).
    NonBlocking,
}

/// Installs the global subscriber. A bad filter falls back to "warn" with a notice.
/// Keep the guard returned until the process ends: dropping it flushes the
/// non-blocking writer's queue.
pub fn init(
    filter: &str,
    format: LogFormat,
    writer: Writer,
) -> Option<tracing_appender::non_blocking::WorkerGuard> {
    let env_filter = match EnvFilter::try_new(filter) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("warning: invalid log filter {filter:?} ({e}); using \"warn\"");
            EnvFilter::new("warn")
        }
    };
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let (make_writer, guard) = match writer {
        Writer::Blocking => (
            tracing_subscriber::fmt::writer::BoxMakeWriter::new(std::io::stderr),
            None,
        ),
        Writer::NonBlocking => {
            let (non_blocking, guard) =
                tracing_appender::non_blocking::NonBlockingBuilder::default()
                    .lossy(true)
                    .thread_name("nodefence-log")
                    .finish(std::io::stderr());
            (
                tracing_subscriber::fmt::writer::BoxMakeWriter::new(non_blocking),
                Some(guard),
            )
        }
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(env_filter)
        .with_writer(make_writer)
        .with_ansi(ansi);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
    guard
}
