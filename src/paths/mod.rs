//! Request paths: the reserved routes, normalisation, the operator's path lists and their
//! compiled matchers.

pub mod matchers;
pub mod normalize;
pub mod reserved;
pub mod rules;
