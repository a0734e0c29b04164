//! One module per payment network. Each exposes a [`crate::fastlane::mechanism::Mechanism`]
//! built from its `networks.json` entry; the gateway never knows which chain it talks to.

pub mod rpc;
pub mod solana;
pub mod xrpl;
