//! The one body type the pipeline's stages see: a client's body still streaming from the
//! connection, or taken in whole before the room.

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::BoxError;
use bytes::Bytes;
use hyper::body::{Frame, SizeHint};

use super::body::RequestBody;
use super::intake::TakenBody;

/// A client's request body as the pipeline's stages pass it on: still streaming from the
/// connection, or taken in whole before the room (see [`crate::wire::intake`]). One type for
/// both, so the request path is compiled once: a second copy of it, for taken bodies alone,
/// cost every bodiless page about 2% more instructions.
/// A taken body is boxed: it is several times the size of a streaming one, and every request is
/// moved a few times on its way through the stages.
pub(crate) enum ClientBody<B> {
    Streaming(B),
    Taken(Box<TakenBody>),
    /// Stands in while the body is being taken in.
    Empty,
}

impl<B: RequestBody + Unpin> hyper::body::Body for ClientBody<B> {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.get_mut() {
            ClientBody::Streaming(body) => Pin::new(body).poll_frame(cx).map_err(Into::into),
            ClientBody::Taken(body) => Pin::new(body.as_mut()).poll_frame(cx).map_err(Into::into),
            ClientBody::Empty => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ClientBody::Streaming(body) => body.is_end_stream(),
            ClientBody::Taken(body) => body.is_end_stream(),
            ClientBody::Empty => true,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ClientBody::Streaming(body) => body.size_hint(),
            ClientBody::Taken(body) => body.size_hint(),
            ClientBody::Empty => SizeHint::with_exact(0),
        }
    }
}
