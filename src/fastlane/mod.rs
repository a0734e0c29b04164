//! The fast lane: visitors buy (x402 v2) a time-limited pass that ranks them at least
//! `customer` at the priority gate, so they skip the line while the pass lasts.
//!
//! Two halves talk through plain function calls:
//! - the **service** (`service/`) answers `/_concert/*`: sessions and CSRF, the x402 exchange,
//!   policy screening, the receipt journal `fastlane.jsonl`, and the grants the request path
//!   reads to decide eligibility;
//! - the **gateway** (`gateway/`) checks terms, owns `gateway/settlements.jsonl`, and calls one
//!   [`mechanism::Mechanism`] per network (`chains/`).
//!
//! `x402` holds the wire types both halves and the chains share; `settings` the parsed
//! `fastlane.json` and `networks.json`; `quote` the offers priced by the line (`-rate`,
//! `-surge`), which both halves recognise; `live` the running lane as the request path reads
//! it, swapped whole when the operator saves new files; `client` the buyer's side
//! (`concert client`), which pays a Concert site from the command line.

pub mod canonical;
pub mod chains;
pub mod client;
pub mod commands;
pub mod facilitator;
pub mod gateway;
pub mod live;
pub mod lookups;
pub mod mechanism;
pub mod quote;
pub mod service;
pub mod settings;
pub mod x402;
