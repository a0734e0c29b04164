//! Request paths: reserved routes, normalisation, the operator's path lists and their compiled
//! matchers.

pub mod rules;
