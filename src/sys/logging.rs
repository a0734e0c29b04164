//! Process and access logging through `tracing`.
//!
//! Access lines (target `concert::access`) go to stdout, everything else to stderr, so operators
//! can ship them separately. `RUST_LOG` filters both; `-log-format json` switches both to JSON.

use std::io::IsTerminal;

use tracing_subscriber::filter::{EnvFilter, filter_fn};
use tracing_subscriber::prelude::*;

/// Target of access-log events.
pub(crate) const ACCESS_TARGET: &str = "concert::access";

/// Installs the global subscriber. Safe to call once per process; later calls are ignored.
pub fn init(json: bool) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let is_access = |meta: &tracing::Metadata<'_>| meta.target() == ACCESS_TARGET;
    let registry = tracing_subscriber::registry().with(filter);
    let result = if json {
        registry
            .with(
                tracing_subscriber::fmt::layer()
                    .json()
                    .with_writer(std::io::stdout)
                    .with_filter(filter_fn(is_access)),
            )
            .with(
                tracing_subscriber::fmt::layer()
                    .json()
                    .with_writer(std::io::stderr)
                    .with_filter(filter_fn(move |m| !is_access(m))),
            )
            .try_init()
    } else {
        registry
            .with(
                tracing_subscriber::fmt::layer()
                    .with_writer(std::io::stdout)
                    .with_ansi(std::io::stdout().is_terminal())
                    .with_target(false)
                    .with_filter(filter_fn(is_access)),
            )
            .with(
                tracing_subscriber::fmt::layer()
                    .with_writer(std::io::stderr)
                    .with_ansi(std::io::stderr().is_terminal())
                    .with_filter(filter_fn(move |m| !is_access(m))),
            )
            .try_init()
    };
    // A test harness or embedding program may already own the global subscriber.
    let _ = result;
}
