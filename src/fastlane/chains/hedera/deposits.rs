//! Hedera deposits: native transfers into the receiving address, newest first.

use super::lookups::HederaLookups;
use crate::fastlane::lookups::{ChainLookups as _, IncomingTransfer};
use crate::fastlane::mechanism::ChainError;

pub(super) async fn incoming(
    lookups: &HederaLookups,
    pay_to: &str,
    since: u64,
) -> Result<Vec<IncomingTransfer>, ChainError> {
    let _ = (pay_to, since);
    Err(ChainError::Unsupported {
        network: lookups.network().to_owned(),
        operation: "deposits",
    })
}
