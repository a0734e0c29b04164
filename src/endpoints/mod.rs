//! What Concert answers itself: the operator routes under `/_room/` and the admin API, the
//! figures behind the stats and the metrics, the waiting page's poll and its files.

mod admin;
pub(crate) mod concert_files;
pub mod figures;
pub(crate) mod metrics;
pub(crate) mod ops;
pub mod queue_status;
