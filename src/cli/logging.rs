//! Logging set-up of the long-running subcommands.

/// Logs to stderr through `tracing`; `RUST_LOG` filters (default `info`, openraft quieter).
pub(crate) fn init_logging(json: bool) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,openraft=warn"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    // try_init: a subscriber set up elsewhere in the process stays.
    let _ = if json { builder.json().try_init() } else { builder.try_init() };
}
