//! Plumbing below the product: clocks, timers, slots, shards, the allocator, logging, systemd,
//! the keyed hash tags are made with, the serving workers' event loop, and what the kernel
//! says about the process.

pub mod allocator;
pub mod coarse_clock;
pub(crate) mod io_wrap;
pub(crate) mod keyed_hash;
pub mod logging;
pub(crate) mod moving_timer;
pub(crate) mod process_figures;
pub mod runtime;
pub(crate) mod shard;
pub(crate) mod slots;
pub(crate) mod systemd;
pub(crate) mod walltime;
pub(crate) mod workers;
