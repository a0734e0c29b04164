//! Read buffers that stay in the cache.
//!
//! Every request or answer read into a buffer is split off its front and handed on. Left
//! alone, the next read lands just past the last one, so over a few dozen requests a
//! connection touches every line of its buffer, and a worker with hundreds of kept-alive
//! connections (clients and origin alike) walks through more memory than the core's cache
//! holds, on the same core as the origin. So a client connection reads each request from the
//! front of its buffer again ([`make_room`]), and an origin connection borrows a buffer from its
//! worker's spares for each exchange ([`take_spare`], [`give_back`]).

use std::cell::RefCell;

use bytes::BytesMut;

/// Spare read buffers a worker keeps for its origin exchanges, newest last.
const SPARES_KEPT: usize = 16;

thread_local! {
    static SPARES: RefCell<Vec<BytesMut>> = const { RefCell::new(Vec::new()) };
}

/// Hands an emptied read buffer to this worker's spares, for whichever exchange reads next. A
/// connection between exchanges then holds no buffer, and the next answer, on any connection,
/// lands in the buffer used last, which is still in the cache: with one buffer per connection,
/// a worker relaying large answers over many connections wrote each one into memory it had
/// not touched since that connection's previous answer.
pub(crate) fn give_back(buf: &mut BytesMut) {
    if !buf.is_empty() || buf.capacity() == 0 {
        return;
    }
    let buf = std::mem::take(buf);
    SPARES.with_borrow_mut(|spares| {
        if spares.len() < SPARES_KEPT {
            spares.push(buf);
        }
    });
}

/// Gives `buf`, when it holds no buffer, this worker's newest spare one; it stays without one
/// when there is none ([`make_room`] then makes one).
pub(crate) fn take_spare(buf: &mut BytesMut) {
    if buf.capacity() != 0 {
        return;
    }
    if let Some(spare) = SPARES.with_borrow_mut(Vec::pop) {
        *buf = spare;
    }
}

/// Makes room in `buf` for the next read, `room` being the buffer's usual size: an empty one
/// starts again at its front ([`rewind`]), and one with less than a quarter of `room` left
/// grows by `room`.
pub(crate) fn make_room(buf: &mut BytesMut, room: usize) {
    if buf.is_empty() {
        rewind(buf, room);
    }
    if buf.capacity() - buf.len() < room / 4 {
        buf.reserve(room);
    }
}

/// Moves an empty `buf` back to the start of its allocation, when nothing read earlier still
/// refers to it (those bytes may still be on their way out). Costs no allocation and no copy: a
/// buffer still shared is left as it is.
fn rewind(buf: &mut BytesMut, room: usize) {
    // With less than `room` spare, `try_reclaim` takes the allocation back when this handle is
    // its only owner, and an empty handle then starts at its front; otherwise it does nothing.
    let _ = buf.try_reclaim(room);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_given_back_buffer_serves_the_next_exchange_from_its_front() {
        let mut first = BytesMut::with_capacity(2048);
        let start = first.as_ptr();
        first.extend_from_slice(&[b'x'; 500]);
        drop(first.split_to(500));
        give_back(&mut first);
        assert_eq!(first.capacity(), 0);
        let mut next = BytesMut::new();
        take_spare(&mut next);
        make_room(&mut next, 2048);
        assert_eq!(next.as_ptr(), start);
        assert!(next.capacity() >= 2048);
        // Nothing spare left: the next one stays without a buffer, to be made as before.
        let mut other = BytesMut::new();
        take_spare(&mut other);
        assert_eq!(other.capacity(), 0);
    }

    #[test]
    fn a_buffer_holding_bytes_is_not_given_back() {
        let mut buf = BytesMut::with_capacity(64);
        buf.extend_from_slice(b"left over");
        give_back(&mut buf);
        assert_eq!(&buf[..], b"left over");
    }

    #[test]
    fn an_emptied_buffer_reads_from_its_front_again() {
        let mut buf = BytesMut::with_capacity(1024);
        let start = buf.as_ptr();
        buf.extend_from_slice(&[b'x'; 300]);
        drop(buf.split_to(300));
        assert_ne!(buf.as_ptr(), start);
        rewind(&mut buf, 1024);
        assert_eq!(buf.as_ptr(), start);
        assert!(buf.capacity() >= 1024);
    }

    #[test]
    fn a_buffer_still_shared_is_left_where_it_is() {
        let mut buf = BytesMut::with_capacity(1024);
        buf.extend_from_slice(&[b'x'; 300]);
        let on_its_way = buf.split_to(300).freeze();
        let before = buf.as_ptr();
        rewind(&mut buf, 1024);
        assert_eq!(buf.as_ptr(), before);
        assert_eq!(&on_its_way[..3], b"xxx");
        drop(on_its_way);
        rewind(&mut buf, 1024);
        assert_ne!(buf.as_ptr(), before);
    }
}
