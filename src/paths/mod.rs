//! Request paths: the reserved routes, normalisation, the operator's path lists and their
//! compiled matchers.

pub(crate) mod matchers;
pub(crate) mod normalize;
pub(crate) mod reserved;
pub(crate) mod rules;
