//! Upgraded connections (WebSocket and other protocols the origin switches to): the client's and
//! the origin's connections joined, with the slot held for their life.

use hyper::upgrade::{OnUpgrade, Upgraded};
use hyper_util::rt::TokioIo;

use crate::sys::slots::SlotHold;

/// The client's and the origin's connections after a 101, with the slot held for their life.
pub(super) struct Tunnel {
    client: OnUpgrade,
    origin: OnUpgrade,
    hold: Option<SlotHold>,
}

pub(super) fn tunnel(client: OnUpgrade, origin: OnUpgrade, hold: Option<SlotHold>) -> Tunnel {
    Tunnel {
        client,
        origin,
        hold,
    }
}

impl Tunnel {
    async fn join(self) -> Option<(TokioIo<Upgraded>, TokioIo<Upgraded>)> {
        match tokio::try_join!(self.client, self.origin) {
            Ok((client, origin)) => Some((TokioIo::new(client), TokioIo::new(origin))),
            Err(err) => {
                tracing::debug!(error = %err, "proxy: upgrade did not complete");
                None
            }
        }
    }

    /// Copies bytes both ways until both directions are finished.
    pub(super) async fn plain(mut self) {
        let _hold = self.hold.take();
        let Some((mut client, mut origin)) = self.join().await else {
            return;
        };
        if let Err(err) = tokio::io::copy_bidirectional(&mut client, &mut origin).await {
            tracing::debug!(error = %err, "proxy: upgraded connection ended with an error");
        }
    }

    /// As [`Tunnel::plain`] for a WebSocket, closed properly on both sides once `draining` is
    /// cancelled.
    pub(super) async fn websocket(mut self, draining: tokio_util::sync::CancellationToken) {
        let _hold = self.hold.take();
        let Some((client, origin)) = self.join().await else {
            return;
        };
        super::websocket::relay(client, origin, draining).await;
    }
}
