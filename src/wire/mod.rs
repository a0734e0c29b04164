//! HTTP as it crosses the wire, below both the server and the proxy: limits, length and chunk
//! parsers, the HTTP/1 smuggling guard, and request bodies (what the proxy forwards, and bodies
//! taken in whole).

pub(crate) mod body;
pub(crate) mod buffers;
pub(crate) mod client_body;
pub(crate) mod codec;
pub(crate) mod intake;
pub(crate) mod limits;
pub(crate) mod names;
pub(crate) mod smuggling;
