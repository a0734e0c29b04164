//! Limits on the HTTP messages Concert reads: a client's request, before any rule sees it, and
//! an origin's response head.

use std::time::Duration;

/// Slow clients get this long to send a request head (slowloris): the first request from the
/// connection's opening, a later one from its first bytes.
pub(crate) const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Most headers one request may carry before it is answered 431. This is hyper's built-in
/// HTTP/1 limit: setting any limit of our own makes hyper allocate its parse arrays (about
/// 8 KiB) on the heap for every request instead of using the stack. HTTP/2 has no such count,
/// so the pipeline checks it there.
pub(crate) const MAX_HEADERS: usize = 100;
/// Largest read buffer per connection; a request head that does not fit is answered 431.
pub(crate) const MAX_HEAD_BYTES: usize = 64 * 1024;
/// Longest request target (path + query) Concert forwards; longer ones get 414.
pub(crate) const MAX_TARGET_BYTES: usize = 8 * 1024;
/// Largest origin response head (status line and headers) read before the answer counts as
/// garbled.
pub(crate) const MAX_RESPONSE_HEAD_BYTES: usize = 128 * 1024;
