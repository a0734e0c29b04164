//! XRPL: the `exact` mechanism for native XRP, its strict transaction codec, keys and
//! signatures, and the ledger calls it makes.
//!
//! The gateway builds one [`XrplExact`] per configured `xrpl:N` network with
//! [`XrplExact::new`]; tests build it over any [`Ledger`] with [`XrplExact::with_ledger`].

pub mod codec;
pub mod deposits;
pub mod exact;
pub mod keys;
pub mod ledger;
pub mod lookups;
pub mod market;
pub mod nft;

pub use exact::XrplExact;
pub use ledger::{AccountState, Ledger, RpcLedger, ServerState, TransactionStatus};
