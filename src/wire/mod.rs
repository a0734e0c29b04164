//! HTTP as it crosses the wire, below both the server and the proxy: limits, length and chunk
//! parsers, and the HTTP/1 smuggling guard.

pub(crate) mod body;
pub(crate) mod codec;
pub(crate) mod intake;
pub(crate) mod limits;
pub(crate) mod names;
pub(crate) mod smuggling;
