//! The log: `[log]`'s level and format, human or JSON, with each flow's span.

use crate::config::{self, LogFormat};

/// Sets up logging as `[log]` says (`RUST_LOG` overrides the level).
pub fn init_logging(cfg: &config::LogSection) {
    use std::io::IsTerminal;
    let ansi = std::io::stderr().is_terminal();
    use tracing_subscriber::util::SubscriberInitExt;
    // `try_init` also routes the `log` crate's records (rustls, via lapin) into it.
    let _ = log_subscriber(cfg, std::io::stderr, ansi).try_init();
}

/// The log as `cfg` describes it, written to `writer`. A line inside a flow carries the
/// flow's span: `flow{trace_id=…}:` in the human format, `"span":{"trace_id":…}` in JSON.
pub fn log_subscriber<W>(
    cfg: &config::LogSection,
    writer: W,
    ansi: bool,
) -> Box<dyn tracing::Subscriber + Send + Sync>
where
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(&cfg.level))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(writer);
    match cfg.format {
        LogFormat::Json => Box::new(
            builder
                .json()
                .flatten_event(true)
                .with_current_span(true)
                .with_span_list(false)
                .finish(),
        ),
        LogFormat::Human => Box::new(builder.finish()),
    }
}
