//! Logging setup: tracing to standard error, human text or JSON lines.

use clap::ValueEnum;
use tracing_subscriber::EnvFilter;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Installs the global subscriber. A bad filter falls back to "warn" with a notice.
pub fn init(filter: &str, format: LogFormat) {
    let env_filter = match EnvFilter::try_new(filter) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("warning: invalid log filter {filter:?} ({e}); using \"warn\"");
            EnvFilter::new("warn")
        }
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(env_filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
}
