//! Memory held per queued visitor, measured with a counting allocator (deterministic, not timed).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Duration;

use concert::room::{Arrival, Decision, Room, RoomSettings};

struct Counting;

static LIVE_BYTES: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards to the system allocator and only counts sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE_BYTES.fetch_add(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE_BYTES.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE_BYTES.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

#[tokio::test(flavor = "current_thread")]
async fn a_queued_visitor_costs_under_256_bytes() {
    let room = Room::new(RoomSettings {
        cap: 1,
        max_queue: 0,
        token_ttl: Duration::from_secs(300),
        first_poll_grace: Duration::from_secs(30),
        reaper: Duration::from_secs(36),
        retry_after_secs: 5,
        pricing: None,
    });
    let client = Some("2001:db8::1".parse().unwrap());
    // Take the only slot so everyone after queues.
    let Decision::Admit(_first) = room.arrive(Arrival {
        ticket_cookie: None,
        pass_cookie: None,
        client,
    }) else {
        panic!("first arrival is admitted")
    };
    let queued = 100_000u64;
    let mut tokens = Vec::with_capacity(queued as usize);
    let before = LIVE_BYTES.load(Ordering::Relaxed);
    for _ in 0..queued {
        match room.arrive(Arrival {
            ticket_cookie: None,
            pass_cookie: None,
            client,
        }) {
            // The token strings handed to the caller are the response's, not the room's: free them.
            Decision::Wait(waiting) => tokens.push(waiting.token.len()),
            _ => panic!("the line is unlimited"),
        }
    }
    let after = LIVE_BYTES.load(Ordering::Relaxed);
    let tokens_vec = (queued as usize * std::mem::size_of::<usize>()) as isize;
    let per_visitor = (after - before - tokens_vec) as f64 / queued as f64;
    println!("memory per queued visitor: {per_visitor:.1} bytes");
    assert_eq!(room.stats().live_queue_depth, queued);
    assert!(
        per_visitor < 256.0,
        "{per_visitor:.1} bytes per queued visitor"
    );
}
