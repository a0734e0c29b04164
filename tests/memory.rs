//! Memory held per queued visitor, measured with a counting allocator (deterministic, not timed).

use std::alloc::{GlobalAlloc, Layout, System};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Duration;

use concert::abuse::{AbuseSettings, Registry};
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

/// Bytes held per waiting visitor by the room and by the abuse registry, which tracks the churn
/// strike every new ticket charges to its client: what a line of `queued` distinct visitors costs.
fn bytes_per_waiting_visitor(queued: u32) -> (f64, f64) {
    let room = Room::new(RoomSettings {
        cap: 1,
        max_queue: 0,
        max_per_address: 32,
        token_ttl: Duration::from_secs(300),
        first_poll_grace: Duration::from_secs(30),
        ready_grace: Duration::from_secs(30),
        reaper: Duration::from_secs(36),
        retry_after_secs: 5,
        pricing: None,
    });
    let abuse = Registry::new(AbuseSettings::default());
    // Take the only slot so everyone after queues.
    let Decision::Admit(_first) = room.arrive(Arrival {
        ticket_cookie: None,
        pass_cookie: None,
        client: Some("2001:db8::1".parse().unwrap()),
    }) else {
        panic!("first arrival is admitted")
    };
    let mut room_bytes = 0;
    let mut abuse_bytes = 0;
    for index in 0..queued {
        let client = IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + index));
        let before = LIVE_BYTES.load(Ordering::Relaxed);
        let decision = room.arrive(Arrival {
            ticket_cookie: None,
            pass_cookie: None,
            client: Some(client),
        });
        // The token string handed out belongs to the response, not the room.
        let Decision::Wait(waiting) = decision else {
            panic!("the line is unlimited")
        };
        drop(waiting);
        let between = LIVE_BYTES.load(Ordering::Relaxed);
        abuse.strike(client, 1);
        let after = LIVE_BYTES.load(Ordering::Relaxed);
        room_bytes += between - before;
        abuse_bytes += after - between;
    }
    assert_eq!(room.stats().live_queue_depth, u64::from(queued));
    // Past `-abuse-max-entries` newcomers take the place of idle entries.
    assert_eq!(abuse.tracked(), (queued as usize).min(100_000));
    (
        room_bytes as f64 / f64::from(queued),
        abuse_bytes as f64 / f64::from(queued),
    )
}

/// Hash tables grow by doubling, so a line that has just outgrown one size costs nearly twice
/// what a line that fills it does: the bound must hold at every length, not a lucky one. Every
/// visitor here comes from an address of its own, the worst case for the per-address ticket
/// counts (about 20 bytes each; the bound was 256 before they existed).
#[tokio::test(flavor = "current_thread")]
async fn a_waiting_visitor_costs_under_272_bytes_at_any_length() {
    let mut worst = 0.0f64;
    for queued in [20_000, 45_000, 60_000, 100_000, 130_000] {
        let (room, abuse) = bytes_per_waiting_visitor(queued);
        println!(
            "{queued} waiting: room {room:.0} + abuse registry {abuse:.0} = {:.0} bytes per visitor",
            room + abuse
        );
        worst = worst.max(room + abuse);
    }
    assert!(worst < 272.0, "{worst:.0} bytes per waiting visitor");
}
