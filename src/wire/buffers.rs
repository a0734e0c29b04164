//! Read buffers that stay in the cache.
//!
//! Each connection keeps one read buffer, and every request or answer read into it is split
//! off the front and handed on. Left alone, the next read lands just past the last one, so over
//! a few dozen requests a connection touches every line of its buffer, and a worker with
//! hundreds of kept-alive connections (clients and origin alike) walks through more memory
//! than the core's cache holds, on the same core as the origin. Reading each message from the
//! front of the allocation instead keeps a connection to the few lines its messages need.

use bytes::BytesMut;

/// Moves an empty `buf` back to the start of its allocation, when nothing read earlier still
/// refers to it (those bytes may still be on their way out); `room` is the buffer's usual size.
/// Costs no allocation and no copy: a buffer still shared is left as it is.
pub(crate) fn rewind(buf: &mut BytesMut, room: usize) {
    debug_assert!(buf.is_empty());
    // With less than `room` spare, `try_reclaim` takes the allocation back when this handle is
    // its only owner, and an empty handle then starts at its front; otherwise it does nothing.
    let _ = buf.try_reclaim(room);
}

#[cfg(test)]
mod tests {
    use super::*;

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
