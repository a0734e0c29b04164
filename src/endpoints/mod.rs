//! What Concert answers itself: the operator routes under `/_room/`, the metrics, the waiting
//! page's poll and its files.

pub mod ops;
