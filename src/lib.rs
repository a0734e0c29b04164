//! Concert: a FIFO waiting-room reverse proxy.
//!
//! The library holds everything; `main.rs` only parses the configuration and calls
//! [`run_to_end`]. The folders follow a request: `server` accepts connections and hands each
//! request to `pipeline`, whose `mod.rs` lists the stages in order: it identifies the client,
//! checks bans ([`abuse`]), answers Concert's own routes ([`endpoints`]), lets admitted visitors
//! through the asset and stream tiers ([`admission`]), queues everyone else in the [`room`], and
//! sends what is admitted to the origin through `proxy`; the [`history`] records what each
//! client asked for and which bans it met. The README's "How it is built" maps
//! every folder.

#![warn(unreachable_pub)]

pub mod abuse;
pub mod admission;
mod app;
pub mod cluster;
pub mod config;
mod demo;
pub mod endpoints;
pub mod fastlane;
pub mod history;
pub mod ipinfo;
mod lifecycle;
mod paths;
mod pipeline;
pub mod portal;
mod proxy;
mod respond;
pub mod room;
mod server;
mod store;
pub mod sys;
pub mod tls;
mod wire;

/// The fake origins of the integration tests, for the unit tests that need a real origin.
#[cfg(test)]
#[path = "../tests/support/origins.rs"]
#[allow(unreachable_pub)]
mod test_origins;

pub use app::{App, BuildError, ChangeError, Counters, Generation, Problem};
pub use lifecycle::{
    QUEUE_SNAPSHOT_EVERY, Running, StartError, VERSION, run, run_to_end, start, start_on_workers,
};
pub use pipeline::{ConnInfo, Pipeline, router};
