//! Bodiless requests to a plain-HTTP origin, exchanged on the caller's own task.
//!
//! Most page and asset requests carry no body. For them the proxy writes the request head
//! straight onto a pooled origin connection ([`conn`]) and reads the response head back
//! ([`head`]) in the same task that serves the client; the response body ([`body`]) is then read
//! from the origin socket by whoever polls it (the client connection writing it out). Nothing
//! crosses a task or a channel, and the connection goes back to the pool when the body's last
//! byte has been read.
//!
//! Requests with a body keep using the proxy's HTTP/1.1 pool, whose connection task can read an
//! early answer while the upload is still going on.

mod body;
mod conn;
mod error;
mod head;

#[cfg(test)]
mod tests;

pub(super) use body::DirectBody;
pub(super) use conn::DirectPool;
pub(super) use error::DirectError;
pub(super) use head::{RequestHead, header_bytes};

#[cfg(test)]
use self::head::*;
