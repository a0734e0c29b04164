//! WebSocket tunnels that close properly when the server stops.
//!
//! Bytes are relayed unchanged; each direction only follows where one frame ends and the next
//! begins (RFC 6455 §5.2). When the drain starts, each direction finishes the frame it is in,
//! then Concert sends that side a Close frame with 1001 ("going away"), waits briefly for the
//! side's own Close and hangs up. Browsers see a clean close and reconnect; the origin sees its
//! client leave. Without this the tunnel was cut at exit and browsers saw 1006 (abnormal).

use std::io;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio_util::sync::CancellationToken;

/// How long a side gets to finish the frame it is sending once the drain starts, and then to
/// answer the Close frame; a side that takes longer is hung up on.
const CLOSE_WAIT: Duration = Duration::from_secs(3);

/// Per direction, as a plain copy uses: a thousand open sockets cost 16 MiB of buffers.
const RELAY_BUFFER: usize = 8 * 1024;

/// Close, status 1001 "going away", as a server sends it (unmasked).
const CLOSE_TO_CLIENT: [u8; 4] = [0x88, 0x02, 0x03, 0xE9];

/// Close, status 1001, as a client must send it: masked with `key`.
fn close_to_origin(key: [u8; 4]) -> [u8; 8] {
    [
        0x88,
        0x82,
        key[0],
        key[1],
        key[2],
        key[3],
        0x03 ^ key[0],
        0xE9 ^ key[1],
    ]
}

/// Follows frame boundaries in one direction of a WebSocket connection.
#[derive(Debug, Default)]
struct FrameBoundaries {
    /// The bytes of the frame header read so far (at most 14).
    header: [u8; 14],
    header_len: usize,
    /// Payload bytes of the current frame still to come.
    payload_left: u64,
}

impl FrameBoundaries {
    /// Whether the bytes seen so far end exactly at the end of a frame.
    fn at_boundary(&self) -> bool {
        self.header_len == 0 && self.payload_left == 0
    }

    /// Follows `bytes`; with `stop_at_boundary`, stops as soon as a frame ends there. Returns how
    /// many bytes were followed.
    fn follow(&mut self, bytes: &[u8], stop_at_boundary: bool) -> usize {
        let mut at = 0;
        while at < bytes.len() {
            if stop_at_boundary && self.at_boundary() {
                break;
            }
            if self.payload_left > 0 {
                let skip = usize::try_from(self.payload_left)
                    .unwrap_or(usize::MAX)
                    .min(bytes.len() - at);
                self.payload_left -= skip as u64;
                at += skip;
                continue;
            }
            self.header[self.header_len] = bytes[at];
            self.header_len += 1;
            at += 1;
            if let Some(payload) = self.complete_header() {
                self.header_len = 0;
                self.payload_left = payload;
            }
        }
        at
    }

    /// The payload length once the header is complete.
    fn complete_header(&self) -> Option<u64> {
        if self.header_len < 2 {
            return None;
        }
        let masked = self.header[1] & 0x80 != 0;
        let short_len = self.header[1] & 0x7F;
        let extended = match short_len {
            126 => 2,
            127 => 8,
            _ => 0,
        };
        let needed = 2 + extended + if masked { 4 } else { 0 };
        if self.header_len < needed {
            return None;
        }
        let payload = match extended {
            0 => u64::from(short_len),
            2 => u64::from(u16::from_be_bytes([self.header[2], self.header[3]])),
            _ => {
                let mut bytes = [0u8; 8];
                bytes.copy_from_slice(&self.header[2..10]);
                u64::from_be_bytes(bytes)
            }
        };
        Some(payload)
    }
}

/// Relays a WebSocket connection both ways until both sides have finished, or closes it
/// properly on both sides once `draining` is cancelled.
pub(super) async fn relay<C, O>(client: C, origin: O, draining: CancellationToken)
where
    C: AsyncRead + AsyncWrite + Unpin,
    O: AsyncRead + AsyncWrite + Unpin,
{
    let (client_reader, client_writer) = tokio::io::split(client);
    let (origin_reader, origin_writer) = tokio::io::split(origin);
    let to_client = one_way(
        origin_reader,
        client_writer,
        &draining,
        &CLOSE_TO_CLIENT[..],
    );
    let close_for_origin = close_to_origin(rand::random());
    let to_origin = one_way(client_reader, origin_writer, &draining, &close_for_origin);
    // A failure on either side ends both (dropping both connections), as a plain copy does: a
    // client that vanished must not leave the origin's side open and the slot held.
    if let Err(err) = tokio::try_join!(to_client, to_origin) {
        tracing::debug!(error = %err, "proxy: WebSocket connection ended with an error");
    }
}

/// One direction: `from`'s bytes to `to` until `from` ends (then `to` is shut for writing, as a
/// plain relay would) or the drain starts (then the frame in progress is finished, `close` is
/// sent, and whatever `from` still sends is read and dropped for a moment).
async fn one_way<R, W>(
    mut from: R,
    mut to: W,
    draining: &CancellationToken,
    close: &[u8],
) -> io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut frames = FrameBoundaries::default();
    let mut buffer = vec![0u8; RELAY_BUFFER];
    loop {
        let read = tokio::select! {
            read = from.read(&mut buffer) => read?,
            () = draining.cancelled() => break,
        };
        if read == 0 {
            return to.shutdown().await;
        }
        frames.follow(&buffer[..read], false);
        to.write_all(&buffer[..read]).await?;
    }
    // Draining: finish the frame in progress, if any, within the wait.
    let finished = tokio::time::timeout(CLOSE_WAIT, async {
        while !frames.at_boundary() {
            let read = from.read(&mut buffer).await?;
            if read == 0 {
                return Ok(false);
            }
            let within_frame = frames.follow(&buffer[..read], true);
            to.write_all(&buffer[..within_frame]).await?;
        }
        Ok::<_, io::Error>(true)
    })
    .await;
    if matches!(finished, Ok(Ok(true))) {
        to.write_all(close).await?;
        // The side answers with its own Close; nothing it sends now goes anywhere.
        let _ = tokio::time::timeout(CLOSE_WAIT, async {
            while from.read(&mut buffer).await.is_ok_and(|read| read > 0) {}
        })
        .await;
    }
    to.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(payload_len: usize, masked: bool) -> Vec<u8> {
        let mut frame = vec![0x82];
        let mask_bit = if masked { 0x80 } else { 0 };
        match payload_len {
            0..=125 => frame.push(mask_bit | payload_len as u8),
            126..=65535 => {
                frame.push(mask_bit | 126);
                frame.extend_from_slice(&(payload_len as u16).to_be_bytes());
            }
            _ => {
                frame.push(mask_bit | 127);
                frame.extend_from_slice(&(payload_len as u64).to_be_bytes());
            }
        }
        if masked {
            frame.extend_from_slice(&[1, 2, 3, 4]);
        }
        frame.extend(std::iter::repeat_n(0xAB, payload_len));
        frame
    }

    #[test]
    fn boundaries_are_found_for_every_length_form_and_any_split() {
        let mut stream = Vec::new();
        let mut ends = Vec::new();
        for (len, masked) in [
            (0, false),
            (5, true),
            (125, false),
            (126, true),
            (70_000, false),
        ] {
            stream.extend(frame(len, masked));
            ends.push(stream.len());
        }
        for split in [1, 2, 3, 7, 13, 4096] {
            let mut frames = FrameBoundaries::default();
            let mut seen_ends = Vec::new();
            let mut offset = 0;
            for chunk in stream.chunks(split) {
                for (index, _) in chunk.iter().enumerate() {
                    frames.follow(&chunk[index..=index], false);
                    if frames.at_boundary() {
                        seen_ends.push(offset + index + 1);
                    }
                }
                offset += chunk.len();
            }
            assert_eq!(seen_ends, ends, "split {split}");
        }
    }

    #[test]
    fn following_up_to_a_boundary_stops_right_after_the_frame() {
        let mut stream = frame(10, false);
        let first_end = stream.len();
        stream.extend(frame(3, true));
        let mut frames = FrameBoundaries::default();
        // Into the first frame, then on with a stop: follows to its end and stops there.
        assert_eq!(frames.follow(&stream[..4], false), 4);
        assert_eq!(frames.follow(&stream[4..], true), first_end - 4);
        assert!(frames.at_boundary());
        // At a boundary already: nothing more is followed.
        assert_eq!(frames.follow(&stream[first_end..], true), 0);
    }

    #[test]
    fn the_close_frame_for_the_origin_unmasks_to_1001() {
        let key = [0x12, 0x34, 0x56, 0x78];
        let close = close_to_origin(key);
        assert_eq!(close[0], 0x88);
        assert_eq!(close[1], 0x82);
        assert_eq!([close[6] ^ key[0], close[7] ^ key[1]], [0x03, 0xE9]);
        assert_eq!(
            u16::from_be_bytes([CLOSE_TO_CLIENT[2], CLOSE_TO_CLIENT[3]]),
            1001
        );
    }
}
