//! What a request body must be for the pipeline to forward it: hyper's own body on the server,
//! axum's when the pipeline is called in process.

use axum::BoxError;
use bytes::Bytes;

/// A request body the pipeline and the proxy can stream to the origin.
pub(crate) trait RequestBody:
    hyper::body::Body<Data = Bytes, Error: Into<BoxError>> + Send + 'static
{
}

impl<B> RequestBody for B where
    B: hyper::body::Body<Data = Bytes, Error: Into<BoxError>> + Send + 'static
{
}
