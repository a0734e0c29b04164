//! Who may reach the origin outside the line, and with what: the admission pass, priority
//! grants and the lane, the asset tier, the stream guard, and the cookies they travel in.

pub mod assets;
pub(crate) mod cookies;
pub(crate) mod form_budget;
pub mod pass;
pub(crate) mod priority;
pub(crate) mod streams;
