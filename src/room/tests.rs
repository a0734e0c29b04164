//! Behaviour of the waiting room as a whole (paused tokio clock unless noted).

use super::line::PromoteError;
use super::snapshot::SnapshotTicket;
use super::*;
use std::time::{SystemTime, UNIX_EPOCH};
use tokio::time::advance;

const TTL: Duration = Duration::from_secs(30);

fn settings(cap: u32) -> RoomSettings {
    RoomSettings {
        cap,
        max_queue: 0,
        max_per_address: 0,
        token_ttl: TTL,
        first_poll_grace: Duration::ZERO,
        ready_grace: Duration::ZERO,
        reaper: Duration::from_secs(36),
        retry_after_secs: 5,
        pricing: None,
    }
}

fn waiting(decision: Decision) -> Waiting {
    match decision {
        Decision::Wait(waiting) => waiting,
        other => panic!("expected to wait, got {other:?}"),
    }
}

fn admission(decision: Decision) -> Admission {
    match decision {
        Decision::Admit(admission) => admission,
        other => panic!("expected admission, got {other:?}"),
    }
}

fn with_ticket(token: &str) -> Arrival<'_> {
    Arrival {
        ticket_cookie: Some(token),
        ..Arrival::default()
    }
}

async fn slot(room: &Room, decision: Decision) -> PageSlot {
    match room.admit(admission(decision)).await {
        AdmitResult::Admitted(slot) => slot,
        AdmitResult::Requeued(waiting) => panic!("requeued at {}", waiting.position),
    }
}

async fn enter(room: &Room) -> PageSlot {
    slot(room, room.arrive(Arrival::default())).await
}

fn position(outcome: PollOutcome) -> u64 {
    match outcome {
        PollOutcome::Waiting { position, .. } | PollOutcome::Throttled { position } => position,
        other => panic!("expected a position, got {other:?}"),
    }
}

fn assert_accounting(room: &Room, in_flight: u64) {
    let stats = room.stats();
    assert_eq!(
        stats.issued,
        stats.now_serving + stats.ghosts + stats.live_queue_depth + in_flight,
        "{stats:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn three_ttl_wait_with_polls_every_3s_refreshes_cookies_at_least_3_times() {
    let room = Room::new(settings(1));
    let _held = enter(&room).await;
    let visitor = waiting(room.arrive(Arrival::default()));
    let mut refreshes = 0;
    for _ in 0..30 {
        advance(Duration::from_secs(3)).await;
        match room.poll(Some(&visitor.token)) {
            PollOutcome::Waiting {
                refresh_cookies,
                position,
                ..
            } => {
                assert_eq!(position, 1);
                refreshes += usize::from(refresh_cookies);
            }
            other => panic!("visitor lost: {other:?}"),
        }
    }
    assert!(refreshes >= 3, "{refreshes} refreshes");
    assert_eq!(room.stats().live_queue_depth, 1);
}

#[tokio::test(start_paused = true)]
async fn no_cookie_refresh_when_fresh_or_throttled() {
    let room = Room::new(settings(1));
    let _held = enter(&room).await;
    let visitor = waiting(room.arrive(Arrival::default()));
    let refreshed = |outcome: PollOutcome| match outcome {
        PollOutcome::Waiting {
            refresh_cookies, ..
        } => refresh_cookies,
        other => panic!("unexpected {other:?}"),
    };
    assert!(!refreshed(room.poll(Some(&visitor.token))), "fresh cookies");
    advance(Duration::from_secs(11)).await;
    assert!(
        refreshed(room.poll(Some(&visitor.token))),
        "a third of the TTL passed"
    );
    advance(Duration::from_millis(100)).await;
    assert_eq!(
        room.poll(Some(&visitor.token)),
        PollOutcome::Throttled { position: 1 }
    );
    advance(Duration::from_millis(1_100)).await;
    assert!(
        !refreshed(room.poll(Some(&visitor.token))),
        "refreshed a moment ago"
    );
}

#[tokio::test(start_paused = true)]
async fn poll_outcomes_missing_unknown_first_throttled_expired() {
    let room = Room::new(settings(1));
    let _held = enter(&room).await;
    assert_eq!(room.poll(None), PollOutcome::CookiesRequired);
    assert_eq!(room.poll(Some("not-a-real-ticket")), PollOutcome::Ready);
    assert_eq!(room.poll(Some(&"0".repeat(32))), PollOutcome::Ready);
    let visitor = waiting(room.arrive(Arrival::default()));
    assert_eq!(visitor.position, 1);
    assert_eq!(visitor.token.len(), 32);
    assert!(
        visitor
            .token
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    );
    assert_eq!(position(room.poll(Some(&visitor.token))), 1);
    advance(Duration::from_millis(100)).await;
    assert_eq!(
        room.poll(Some(&visitor.token)),
        PollOutcome::Throttled { position: 1 }
    );
    advance(TTL + Duration::from_secs(1)).await;
    assert_eq!(room.poll(Some(&visitor.token)), PollOutcome::Ready);
    let stats = room.stats();
    assert_eq!(stats.live_queue_depth, 0);
    assert_eq!(stats.evicted_total, 1);
}

#[tokio::test(start_paused = true)]
async fn throttled_polls_keep_the_token_alive() {
    let room = Room::new(settings(1));
    let _held = enter(&room).await;
    let visitor = waiting(room.arrive(Arrival::default()));
    let mut throttled = 0;
    for _ in 0..120 {
        advance(Duration::from_millis(600)).await;
        if let PollOutcome::Throttled { .. } = room.poll(Some(&visitor.token)) {
            throttled += 1;
        }
    }
    assert!(throttled > 30);
    assert_eq!(room.reap_now(), 0);
    assert_eq!(position(room.poll(Some(&visitor.token))), 1);
}

#[tokio::test(start_paused = true)]
async fn rerender_marks_seen_so_first_poll_grace_spares_it() {
    let room = Room::new(RoomSettings {
        first_poll_grace: Duration::from_secs(10),
        ..settings(1)
    });
    let _held = enter(&room).await;
    let rerendered = waiting(room.arrive(Arrival::default()));
    let silent = waiting(room.arrive(Arrival::default()));
    advance(Duration::from_secs(5)).await;
    assert_eq!(
        waiting(room.arrive(with_ticket(&rerendered.token))).position,
        1
    );
    advance(Duration::from_secs(6)).await;
    assert_eq!(room.reap_now(), 1);
    assert_eq!(room.poll(Some(&silent.token)), PollOutcome::Ready);
    assert_eq!(position(room.poll(Some(&rerendered.token))), 1);
}

#[tokio::test(start_paused = true)]
async fn cap1_ready_then_reaped_ticket_lets_next_arrival_in_on_fast_path() {
    let room = Room::new(settings(1));
    let held = enter(&room).await;
    let _gone = waiting(room.arrive(Arrival::default()));
    drop(held);
    advance(TTL + Duration::from_secs(1)).await;
    assert_eq!(room.reap_now(), 1);
    let _next = enter(&room).await;
    assert_eq!(room.stats().now_serving, 2);
    assert_accounting(&room, 1);
}

#[tokio::test(start_paused = true)]
async fn expired_on_poll_then_release_reaches_now_serving_2() {
    let room = Room::new(settings(1));
    let held = enter(&room).await;
    let visitor = waiting(room.arrive(Arrival::default()));
    advance(TTL + Duration::from_secs(1)).await;
    assert_eq!(room.poll(Some(&visitor.token)), PollOutcome::Ready);
    assert_eq!(room.stats().ghosts, 1);
    drop(held);
    let stats = room.stats();
    assert_eq!(stats.now_serving, 2);
    assert_eq!(stats.ghosts, 0);
    assert_eq!(stats.occupancy, 0);
}

#[tokio::test(start_paused = true)]
async fn cancelled_slot_wait_retires_the_token_and_counts_a_timeout() {
    let room = Room::new(settings(1));
    let held = enter(&room).await;
    let visitor = waiting(room.arrive(Arrival::default()));
    drop(held);
    // Someone else holds the only slot, so the ready visitor has to wait for it.
    let blocker = room.shared.gate.try_acquire().unwrap();
    let claimed = admission(room.arrive(with_ticket(&visitor.token)));
    assert_eq!(
        room.stats().live_queue_depth,
        0,
        "claimed tokens leave the store"
    );
    let attempt = tokio::time::timeout(Duration::from_secs(1), room.admit(claimed)).await;
    assert!(attempt.is_err());
    let stats = room.stats();
    assert_eq!(stats.timeouts_total, 1);
    assert_eq!(stats.now_serving, 2);
    assert_eq!(room.poll(Some(&visitor.token)), PollOutcome::Ready);
    assert_accounting(&room, 0);
    drop(blocker);
}

#[tokio::test(start_paused = true)]
async fn ready_visitor_waits_a_bounded_time_then_keeps_its_place() {
    let room = Room::new(settings(1));
    let held = enter(&room).await;
    let visitor = waiting(room.arrive(Arrival::default()));
    let behind = waiting(room.arrive(Arrival::default()));
    drop(held);
    let blocker = room.shared.gate.try_acquire().unwrap();
    let started = Instant::now();
    let claimed = admission(room.arrive(with_ticket(&visitor.token)));
    let requeued = match room.admit(claimed).await {
        AdmitResult::Requeued(waiting) => waiting,
        AdmitResult::Admitted(_) => panic!("no slot was free"),
    };
    assert_eq!(started.elapsed(), Duration::from_secs(10));
    assert_eq!(requeued.token, visitor.token);
    assert_eq!(requeued.position, 1);
    assert_eq!(room.stats().timeouts_total, 0);
    assert_eq!(room.poll(Some(&visitor.token)), PollOutcome::Ready);
    assert_eq!(position(room.poll(Some(&behind.token))), 1);
    drop(blocker);
    let _inside = slot(&room, room.arrive(with_ticket(&visitor.token))).await;
    assert_accounting(&room, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_admits_against_the_reaper_keep_every_ticket_accounted() {
    let room = Room::new(RoomSettings {
        token_ttl: Duration::from_millis(1),
        ..settings(2)
    });
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let room = Arc::clone(&room);
        tasks.push(tokio::spawn(async move {
            let mut token: Option<String> = None;
            for _ in 0..300 {
                let decision = room.arrive(Arrival {
                    ticket_cookie: token.as_deref(),
                    ..Arrival::default()
                });
                match decision {
                    Decision::Admit(admission) => {
                        token = None;
                        if let AdmitResult::Requeued(waiting) = room.admit(admission).await {
                            token = Some(waiting.token);
                        }
                    }
                    Decision::Wait(waiting) => token = Some(waiting.token),
                    Decision::Full | Decision::AddressFull => token = None,
                }
                tokio::task::yield_now().await;
            }
        }));
    }
    let reaper = {
        let room = Arc::clone(&room);
        tokio::spawn(async move {
            for _ in 0..600 {
                room.reap_now();
                tokio::task::yield_now().await;
            }
        })
    };
    for task in tasks {
        task.await.unwrap();
    }
    reaper.await.unwrap();
    assert_accounting(&room, 0);
    let stats = room.stats();
    assert_eq!(stats.occupancy, 0);
    assert_eq!(room.shared.gate.in_use(), 0);
    assert!(stats.admitted_total > 0);
}

#[tokio::test(start_paused = true)]
async fn set_cap_one_to_two_with_ghost_two_consumes_it_and_readies_three() {
    let room = Room::new(settings(1));
    let _held = enter(&room).await;
    let second = waiting(room.arrive(Arrival::default()));
    let third = waiting(room.arrive(Arrival::default()));
    assert!(room.remove_token(&second.token));
    assert_eq!(room.stats().ghosts, 1);
    room.reconfigure(settings(2));
    let stats = room.stats();
    assert_eq!(stats.ghosts, 0);
    assert_eq!(stats.now_serving, 1);
    assert_eq!(stats.cap, 2);
    let _third_inside = slot(&room, room.arrive(with_ticket(&third.token))).await;
    assert_accounting(&room, 2);
}

#[tokio::test(start_paused = true)]
async fn triple_ghost_ahead_never_yields_a_non_positive_position() {
    let room = Room::new(settings(1));
    let held = enter(&room).await;
    let ahead: Vec<Waiting> = (0..3)
        .map(|_| waiting(room.arrive(Arrival::default())))
        .collect();
    let last = waiting(room.arrive(Arrival::default()));
    assert_eq!(last.position, 4);
    for (gone, visitor) in ahead.iter().enumerate() {
        assert!(room.remove_token(&visitor.token));
        advance(Duration::from_millis(1_100)).await;
        assert_eq!(position(room.poll(Some(&last.token))), 3 - gone as u64);
    }
    advance(Duration::from_millis(100)).await;
    assert_eq!(
        room.poll(Some(&last.token)),
        PollOutcome::Throttled { position: 1 }
    );
    drop(held);
    advance(Duration::from_millis(1_100)).await;
    assert_eq!(room.poll(Some(&last.token)), PollOutcome::Ready);
}

#[tokio::test(start_paused = true)]
async fn breaker_trips_at_max_queue_and_ghosts_do_not_count() {
    let room = Room::new(RoomSettings {
        max_queue: 1,
        ..settings(1)
    });
    let _held = enter(&room).await;
    let first = waiting(room.arrive(Arrival::default()));
    position(room.poll(Some(&first.token)));
    assert!(matches!(room.arrive(Arrival::default()), Decision::Full));
    assert_eq!(room.stats().max_queue_depth, 1);
    assert!(room.remove_token(&first.token));
    let again = waiting(room.arrive(Arrival::default()));
    position(room.poll(Some(&again.token)));
    assert!(matches!(room.arrive(Arrival::default()), Decision::Full));
}

/// Clients that never keep the cookie fill max-queue inside the first-poll grace. Within two
/// poll intervals a full line refuses newcomers as always; after that a newcomer takes an
/// abandoned ticket's room instead of waiting out the whole grace.
#[tokio::test(start_paused = true)]
async fn a_cookieless_burst_locks_newcomers_out_for_two_poll_intervals_only() {
    let room = Room::new(RoomSettings {
        max_queue: 5,
        first_poll_grace: Duration::from_secs(30),
        retry_after_secs: 5,
        ..settings(1)
    });
    let _held = enter(&room).await;
    for _ in 0..5 {
        waiting(room.arrive(Arrival::default()));
    }
    // While the burst is young, the full line refuses the newcomer.
    assert!(matches!(room.arrive(Arrival::default()), Decision::Full));
    advance(Duration::from_secs(9)).await;
    assert!(matches!(room.arrive(Arrival::default()), Decision::Full));
    // Ten seconds on, the burst had its chance: each newcomer takes one abandoned ticket's room.
    advance(Duration::from_secs(1)).await;
    let real: Vec<Waiting> = (0..5)
        .map(|_| {
            let visitor = waiting(room.arrive(Arrival::default()));
            position(room.poll(Some(&visitor.token)));
            visitor
        })
        .collect();
    let stats = room.stats();
    assert_eq!(stats.live_queue_depth, 5, "{stats:?}");
    assert_eq!(stats.evicted_total, 5, "the never-polled tickets were shed");
    assert_eq!(room.shared.tokens.proven(), 5);
    assert_eq!(room.shared.tokens.unproven(), 0);
    // A full line of proven visitors is never displaced.
    for _ in 0..6 {
        advance(Duration::from_secs(10)).await;
        for visitor in &real {
            position(room.poll(Some(&visitor.token)));
        }
    }
    assert!(matches!(room.arrive(Arrival::default()), Decision::Full));
    assert_eq!(position(room.poll(Some(&real[0].token))), 1);
    assert_accounting(&room, 1);
}

#[tokio::test(start_paused = true)]
async fn proven_visitors_outlast_any_cookieless_burst() {
    let room = Room::new(RoomSettings {
        max_queue: 3,
        first_poll_grace: Duration::from_secs(30),
        ..settings(1)
    });
    let _held = enter(&room).await;
    let proven = waiting(room.arrive(Arrival::default()));
    // Seen again with its cookie (a page reload) counts as proof, like a poll.
    assert_eq!(waiting(room.arrive(with_ticket(&proven.token))).position, 1);
    // A steady stream of clients that never keep the cookie, four seconds apart: they take
    // each other's room once a ticket is ten seconds old, never the proven visitor's.
    let mut queued = 0;
    for _ in 0..300 {
        advance(Duration::from_secs(4)).await;
        if let Decision::Wait(_) = room.arrive(Arrival::default()) {
            queued += 1;
        }
        position(room.poll(Some(&proven.token)));
    }
    assert!(queued > 100, "only {queued} of the stream were queued");
    assert_eq!(position(room.poll(Some(&proven.token))), 1);
    let stats = room.stats();
    assert!(stats.live_queue_depth <= 3, "{stats:?}");
    assert!(room.shared.tokens.unproven_by_scan() <= 2);
    assert!(
        room.shared.tokens.unproven_order_len() <= 8,
        "{} order entries",
        room.shared.tokens.unproven_order_len()
    );
}

#[tokio::test(start_paused = true)]
async fn the_unproven_order_stays_short_while_visitors_prove_themselves() {
    let room = Room::new(settings(1));
    let _held = enter(&room).await;
    for _ in 0..1_000 {
        let visitor = waiting(room.arrive(Arrival::default()));
        position(room.poll(Some(&visitor.token)));
    }
    assert!(room.shared.tokens.unproven_order_len() <= 2);
    // A silent ticket at the front holds the stale entries behind it; the reaper compacts them.
    let silent = waiting(room.arrive(Arrival::default()));
    for _ in 0..2_000 {
        let visitor = waiting(room.arrive(Arrival::default()));
        position(room.poll(Some(&visitor.token)));
    }
    assert!(room.shared.tokens.unproven_order_len() > 1_000);
    assert_eq!(room.reap_now(), 0);
    assert_eq!(room.shared.tokens.unproven_order_len(), 1);
    assert_eq!(position(room.poll(Some(&silent.token))), 1_001);
}

#[tokio::test(start_paused = true)]
async fn visitors_are_admitted_in_arrival_order() {
    let room = Room::new(settings(1));
    let mut held = enter(&room).await;
    let visitors: Vec<Waiting> = (0..6)
        .map(|_| waiting(room.arrive(Arrival::default())))
        .collect();
    let mut order = Vec::new();
    for _ in 0..visitors.len() {
        drop(held);
        let mut admitted = None;
        // Everyone comes back, latest first; only the front of the line may enter.
        for (index, visitor) in visitors.iter().enumerate().rev() {
            if order.contains(&index) {
                continue;
            }
            match room.arrive(with_ticket(&visitor.token)) {
                Decision::Admit(claimed) => {
                    assert!(admitted.is_none(), "two visitors ready for one slot");
                    admitted = Some((index, claimed));
                }
                Decision::Wait(_) => {}
                Decision::Full | Decision::AddressFull => panic!("no bound configured"),
            }
        }
        let (index, claimed) = admitted.expect("someone is ready");
        order.push(index);
        held = match room.admit(claimed).await {
            AdmitResult::Admitted(slot) => slot,
            AdmitResult::Requeued(_) => panic!("slot was free"),
        };
    }
    assert_eq!(order, vec![0, 1, 2, 3, 4, 5]);
}

#[tokio::test(start_paused = true)]
async fn vip_pass_promotes_to_front_once_without_ties() {
    let room = Room::new(settings(1));
    let held = enter(&room).await;
    let regular: Vec<Waiting> = (0..3)
        .map(|_| waiting(room.arrive(Arrival::default())))
        .collect();
    room.add_pass("vip-pass", Duration::from_secs(3_600));
    let vip_arrival = Arrival {
        pass_cookie: Some("vip-pass"),
        ..Arrival::default()
    };
    let vip = waiting(room.arrive(vip_arrival));
    assert_eq!(vip.position, 1);
    for (index, visitor) in regular.iter().enumerate() {
        assert_eq!(position(room.poll(Some(&visitor.token))), index as u64 + 2);
    }
    let again = waiting(room.arrive(Arrival {
        ticket_cookie: Some(&vip.token),
        pass_cookie: Some("vip-pass"),
        client: None,
    }));
    assert_eq!(again.position, 1);
    assert_eq!(room.stats().promoted_total, 1);
    match room.poll(Some(&vip.token)) {
        PollOutcome::Waiting { has_pass, .. } => assert!(has_pass),
        other => panic!("{other:?}"),
    }
    drop(held);
    advance(Duration::from_secs(2)).await;
    assert_eq!(room.poll(Some(&vip.token)), PollOutcome::Ready);
    assert_eq!(
        position(room.poll(Some(&regular[0].token))),
        1,
        "exactly one ready"
    );
    assert_accounting(&room, 0);
}

#[tokio::test(start_paused = true)]
async fn queue_hook_runs_inline_with_the_stale_ticket_flag() {
    let room = Room::new(settings(1));
    let _held = enter(&room).await;
    let events: Arc<Mutex<Vec<QueueEvent>>> = Arc::default();
    let sink = Arc::clone(&events);
    room.set_queue_hook(Arc::new(move |event: &QueueEvent| sink.lock().push(*event)));
    let client: IpAddr = "203.0.113.7".parse().unwrap();
    waiting(room.arrive(Arrival {
        client: Some(client),
        ..Arrival::default()
    }));
    assert_eq!(
        events.lock().as_slice(),
        &[QueueEvent {
            client: Some(client),
            stale_ticket: false
        }]
    );
    // A made-up value, even one shaped like a ticket, is no ticket.
    waiting(room.arrive(with_ticket("not-a-real-ticket")));
    assert!(!events.lock()[1].stale_ticket);
    waiting(room.arrive(with_ticket(&"ab".repeat(16))));
    assert!(!events.lock()[2].stale_ticket);
    // A ticket this room issued and has since forgotten is a returning visitor.
    let forgotten = waiting(room.arrive(Arrival::default())).token;
    assert!(room.remove_token(&forgotten));
    waiting(room.arrive(with_ticket(&forgotten)));
    assert!(events.lock()[4].stale_ticket);
    assert_eq!(room.stats().queued_total, 5);
}

#[tokio::test(start_paused = true)]
async fn tickets_are_recognised_across_rooms_sharing_a_secret_only() {
    const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef";
    let before_restart = Room::sealed(settings(1), TicketSeal::from_secret(SECRET, None));
    let _held = enter(&before_restart).await;
    let old_ticket = waiting(before_restart.arrive(Arrival::default())).token;

    let events: Arc<Mutex<Vec<QueueEvent>>> = Arc::default();
    let after_restart = Room::sealed(settings(1), TicketSeal::from_secret(SECRET, None));
    let other_secret = Room::new(settings(1));
    for room in [&after_restart, &other_secret] {
        let _held = enter(room).await;
        let sink = Arc::clone(&events);
        room.set_queue_hook(Arc::new(move |event: &QueueEvent| sink.lock().push(*event)));
        waiting(room.arrive(with_ticket(&old_ticket)));
    }
    let stale: Vec<bool> = events.lock().iter().map(|e| e.stale_ticket).collect();
    assert_eq!(stale, [true, false]);
}

#[tokio::test(start_paused = true)]
async fn one_address_holds_at_most_its_share_of_the_line() {
    let room = Room::new(RoomSettings {
        max_per_address: 2,
        ..settings(1)
    });
    let _held = enter(&room).await;
    let from = |ip: &str| Arrival {
        client: Some(ip.parse().unwrap()),
        ..Arrival::default()
    };
    let first = waiting(room.arrive(from("203.0.113.7"))).token;
    waiting(room.arrive(from("203.0.113.7")));
    assert!(matches!(
        room.arrive(from("203.0.113.7")),
        Decision::AddressFull
    ));
    // Another address is not affected; a returning visitor of the full one keeps their place.
    waiting(room.arrive(from("198.51.100.4")));
    let back = waiting(room.arrive(Arrival {
        ticket_cookie: Some(&first),
        ..from("203.0.113.7")
    }));
    assert_eq!(back.token, first);
    // IPv6 addresses count per /64: another host in the same /64 is the same client.
    waiting(room.arrive(from("2001:db8:1:2::1")));
    waiting(room.arrive(from("2001:db8:1:2::ffff")));
    assert!(matches!(
        room.arrive(from("2001:db8:1:2:aaaa::9")),
        Decision::AddressFull
    ));
    waiting(room.arrive(from("2001:db8:1:3::1")));
    // A ticket that ends frees a place for its address.
    assert!(room.remove_token(&first));
    waiting(room.arrive(from("203.0.113.7")));
    // An exempt address is never bounded.
    room.set_address_exemption(Arc::new(|ip: IpAddr| ip.is_ipv4()));
    waiting(room.arrive(from("203.0.113.7")));
    waiting(room.arrive(from("203.0.113.7")));
    assert!(matches!(
        room.arrive(from("2001:db8:1:2::2")),
        Decision::AddressFull
    ));
}

#[tokio::test(start_paused = true)]
async fn removals_by_predicate_and_by_token_are_counted() {
    let room = Room::new(settings(1));
    let _held = enter(&room).await;
    let a: IpAddr = "203.0.113.7".parse().unwrap();
    let b: IpAddr = "198.51.100.4".parse().unwrap();
    let arrive = |client| {
        waiting(room.arrive(Arrival {
            client: Some(client),
            ..Arrival::default()
        }))
    };
    let (_a1, _b1, _a2) = (arrive(a), arrive(b), arrive(a));
    let anonymous = waiting(room.arrive(Arrival::default()));
    assert_eq!(room.remove_where(|info| info.client == Some(a)), 2);
    assert_eq!(room.stats().live_queue_depth, 2);
    // A ban tests addresses: a visitor without one is never matched.
    assert_eq!(room.remove_clients(|_| true), 1);
    assert_eq!(room.stats().live_queue_depth, 1);
    assert_eq!(position(room.poll(Some(&anonymous.token))), 1);
    assert!(room.remove_token(&anonymous.token));
    assert!(!room.remove_token(&anonymous.token));
    assert!(!room.remove_token("nope"));
    let stats = room.stats();
    assert_eq!(stats.removed_total, 4);
    assert_eq!(stats.queue_depth, 0);
    assert_accounting(&room, 1);
}

#[tokio::test(start_paused = true)]
async fn admin_promotion_and_line_listing() {
    let room = Room::new(settings(1));
    let _held = enter(&room).await;
    let visitors: Vec<Waiting> = (0..4)
        .map(|_| waiting(room.arrive(Arrival::default())))
        .collect();
    assert_eq!(room.promote(&visitors[3].token, 1), Ok(true));
    assert_eq!(room.promote(&visitors[3].token, 1), Ok(false));
    assert_eq!(
        room.promote(&"f".repeat(32), 1),
        Err(RoomPromoteError::NotFound)
    );
    let front = room.line_front(3);
    let tokens: Vec<String> = front.iter().map(|row| row.info.token_hex()).collect();
    assert_eq!(
        tokens,
        vec![
            visitors[3].token.clone(),
            visitors[0].token.clone(),
            visitors[1].token.clone()
        ]
    );
    let positions: Vec<i64> = front.iter().map(|row| row.position).collect();
    assert_eq!(positions, vec![1, 2, 3]);
    assert!(front[0].info.promoted);
    assert!(room.set_ticket_rank(&visitors[0].token, 3));
    assert_eq!(room.line_front(2)[1].info.rank, 3);
    assert!(room.is_busy());
}

#[tokio::test(start_paused = true)]
async fn promoting_a_ready_visitor_is_refused() {
    let room = Room::new(settings(1));
    let held = enter(&room).await;
    let visitor = waiting(room.arrive(Arrival::default()));
    drop(held);
    assert_eq!(
        room.promote(&visitor.token, 1),
        Err(RoomPromoteError::Refused(PromoteError::AlreadyReady))
    );
}

#[tokio::test(start_paused = true)]
async fn estimate_becomes_known_once_the_line_moves() {
    let room = Room::new(settings(1));
    let held = enter(&room).await;
    let early = waiting(room.arrive(Arrival::default()));
    assert!(!early.estimate.known, "nothing has moved yet");
    assert_eq!(early.estimate, WaitEstimate::UNKNOWN);
    drop(held);
    drop(slot(&room, room.arrive(with_ticket(&early.token))).await);
    // One visit every two seconds for forty seconds.
    for _ in 0..20 {
        advance(Duration::from_secs(2)).await;
        drop(enter(&room).await);
    }
    let _held = enter(&room).await;
    let visitor = waiting(room.arrive(Arrival::default()));
    assert!(visitor.estimate.known, "{:?}", visitor.estimate);
    assert!(visitor.estimate.min_secs >= 1, "{:?}", visitor.estimate);
    assert!(visitor.estimate.min_secs <= visitor.estimate.max_secs);
    assert!(visitor.estimate.max_secs <= 6, "{:?}", visitor.estimate);
    assert!(room.stats().admission_rate > 0.3);
}

/// Cap 1, one visit a second, and nine abandoned tickets behind every real visitor: the edge
/// passes ten tickets per visit, but positions fall by one a second, and that is what the
/// rate and the estimate must say.
#[tokio::test(start_paused = true)]
async fn abandoned_tickets_do_not_speed_up_the_measured_rate() {
    let room = Room::new(RoomSettings {
        token_ttl: Duration::from_secs(600),
        first_poll_grace: Duration::from_secs(10),
        ..settings(1)
    });
    let mut held = enter(&room).await;
    let mut real = Vec::new();
    for _ in 0..150 {
        let visitor = waiting(room.arrive(Arrival::default()));
        position(room.poll(Some(&visitor.token)));
        real.push(visitor.token);
        for _ in 0..9 {
            waiting(room.arrive(Arrival::default()));
        }
    }
    advance(Duration::from_secs(11)).await;
    assert_eq!(
        room.reap_now(),
        1_350,
        "the never-polled tickets are retired"
    );
    let watched = real.pop().unwrap();
    let mut first_position = None;
    // Long enough for the smoothed rate to forget the idle start.
    let seconds = 120u64;
    for (second, token) in real.iter().take(seconds as usize).enumerate() {
        drop(held);
        held = slot(&room, room.arrive(with_ticket(token))).await;
        advance(Duration::from_secs(1)).await;
        let now_at = position(room.poll(Some(&watched)));
        if second == 0 {
            first_position = Some(now_at);
        }
    }
    let moved = first_position.unwrap() - position(room.poll(Some(&watched)));
    let per_second = moved as f64 / (seconds - 1) as f64;
    assert!((per_second - 1.0).abs() < 0.05, "{per_second} places/s");
    let rate = room.stats().admission_rate;
    assert!(
        (rate - per_second).abs() / per_second < 0.05,
        "measured {rate}/s, positions fell {per_second}/s"
    );
    advance(Duration::from_secs(1)).await;
    let PollOutcome::Waiting {
        position: place,
        estimate,
        ..
    } = room.poll(Some(&watched))
    else {
        panic!("the watched visitor left the line");
    };
    let wait = (place as f64 / per_second).round() as u64;
    assert!(
        estimate.known && estimate.min_secs <= wait && wait <= estimate.max_secs,
        "position {place} shown {estimate:?}, real wait about {wait} s"
    );
}

#[tokio::test(start_paused = true)]
async fn reaper_task_reaps_and_stops() {
    let room = Room::new(RoomSettings {
        reaper: Duration::from_secs(5),
        ..settings(1)
    });
    let held = enter(&room).await;
    let visitor = waiting(room.arrive(Arrival::default()));
    let task = room.spawn_reaper();
    tokio::time::sleep(TTL + Duration::from_secs(6)).await;
    assert_eq!(room.stats().live_queue_depth, 0);
    assert_eq!(room.poll(Some(&visitor.token)), PollOutcome::Ready);
    room.stop_reaper();
    tokio::time::timeout(Duration::from_secs(1), task)
        .await
        .unwrap()
        .unwrap();
    let task = room.spawn_reaper();
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert!(
        !task.is_finished(),
        "a new reaper runs after an earlier stop"
    );
    drop(held);
    drop(room);
    tokio::time::timeout(Duration::from_secs(600), task)
        .await
        .unwrap()
        .unwrap();
}

fn wall(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(secs)
}

#[tokio::test(start_paused = true)]
async fn snapshot_round_trip_keeps_order_tokens_and_ages_and_drops_the_dead() {
    let source = Room::new(settings(1));
    let held = enter(&source).await;
    let dead = waiting(source.arrive(Arrival::default()));
    advance(TTL + Duration::from_secs(5)).await;
    let client: IpAddr = "203.0.113.7".parse().unwrap();
    let first = waiting(source.arrive(Arrival {
        client: Some(client),
        ..Arrival::default()
    }));
    let second = waiting(source.arrive(Arrival::default()));
    let third = waiting(source.arrive(Arrival::default()));
    assert_eq!(
        position(source.poll(Some(&first.token))),
        2,
        "dead one still counts"
    );
    assert!(source.promote(&third.token, 3).unwrap());
    source.add_pass("vip", Duration::from_secs(600));
    advance(Duration::from_secs(4)).await;
    let snapshot = source.export_snapshot(wall(1_000_000));
    drop(held);
    assert_eq!(snapshot.tickets.len(), 4);
    assert_eq!(snapshot.tickets[0].token, dead.token);
    let json = snapshot.to_json().unwrap();
    let restored = Snapshot::from_json(&json).unwrap();

    let target = Room::new(settings(1));
    // Restarted 2 minutes later: the downtime is not held against anyone.
    assert_eq!(
        target
            .import_snapshot(restored.clone(), wall(1_000_120))
            .unwrap(),
        3
    );
    let front = target.line_front(10);
    let tokens: Vec<String> = front.iter().map(|row| row.info.token_hex()).collect();
    assert_eq!(
        tokens,
        vec![
            first.token.clone(),
            third.token.clone(),
            second.token.clone()
        ]
    );
    assert!(front[0].ready, "cap 1: the first restored ticket may enter");
    assert_eq!(front[1].position, 1);
    assert_eq!(front[2].position, 2);
    assert_eq!(front[0].info.client, Some(client));
    assert!(front[0].info.seen && !front[2].info.seen);
    assert!(front[1].info.promoted);
    assert_eq!(front[0].info.last_seen.elapsed(), Duration::from_secs(4));
    assert_eq!(front[2].info.joined.elapsed(), Duration::from_secs(4));
    match target.poll(Some(&second.token)) {
        PollOutcome::Waiting {
            refresh_cookies, ..
        } => assert!(
            refresh_cookies,
            "restored cookies are re-sent on the first poll"
        ),
        other => panic!("{other:?}"),
    }
    assert!(target.pass_valid("vip"));
    assert!(matches!(
        target.import_snapshot(restored.clone(), wall(1_000_120)),
        Err(SnapshotError::NotPristine)
    ));
    // A pass that expired during the downtime is dropped.
    let late = Room::new(settings(1));
    late.import_snapshot(restored, wall(1_010_000)).unwrap();
    assert!(!late.pass_valid("vip"));
}

#[test]
fn snapshot_import_rejects_bad_version_and_tokens() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let _guard = runtime.enter();
    let ticket = |token: &str| SnapshotTicket {
        token: token.to_string(),
        created_at: WallTime(0),
        last_seen: WallTime(0),
        last_poll: WallTime::ZERO,
        client_key: String::new(),
        seen: false,
        promoted: false,
        has_pass: false,
    };
    let snapshot = |tickets: Vec<SnapshotTicket>| Snapshot {
        version: 1,
        exported_at: WallTime(0),
        tickets,
        passes: Vec::new(),
    };
    let room = Room::new(settings(1));
    let import = |snapshot: Snapshot| room.import_snapshot(snapshot, wall(0));
    assert!(matches!(
        import(Snapshot {
            version: 2,
            ..snapshot(Vec::new())
        }),
        Err(SnapshotError::Version(2))
    ));
    assert!(matches!(
        import(snapshot(vec![ticket("")])),
        Err(SnapshotError::EmptyToken)
    ));
    assert!(matches!(
        import(snapshot(vec![ticket(&"a".repeat(257))])),
        Err(SnapshotError::TokenTooLong)
    ));
    let token = "ab".repeat(16);
    assert!(matches!(
        import(snapshot(vec![ticket(&token), ticket(&token)])),
        Err(SnapshotError::DuplicateToken)
    ));
    assert_eq!(import(snapshot(vec![ticket(&token)])).unwrap(), 1);
}

#[tokio::test(start_paused = true)]
async fn pricing_reports_rate_and_skip_cost_without_a_pass() {
    let room = Room::new(RoomSettings {
        pricing: Pricing::new(1.0, 0.5),
        ..settings(1)
    });
    let _held = enter(&room).await;
    let _front = waiting(room.arrive(Arrival::default()));
    let back = waiting(room.arrive(Arrival::default()));
    match room.poll(Some(&back.token)) {
        PollOutcome::Waiting {
            position,
            rate_per_pos,
            skip_cost,
            ..
        } => {
            assert_eq!(position, 2);
            assert_eq!(rate_per_pos, Some(2.0));
            assert_eq!(skip_cost, Some(2.0));
        }
        other => panic!("{other:?}"),
    }
    assert!(Pricing::new(0.0, 0.0).is_none());
}

#[tokio::test(start_paused = true)]
async fn a_skip_costs_the_visitors_ahead_and_without_a_ticket_the_whole_line() {
    let room = Room::new(RoomSettings {
        pricing: Pricing::new(1.0, 0.5),
        ..settings(1)
    });
    let held = enter(&room).await;
    let front = waiting(room.arrive(Arrival::default()));
    let back = waiting(room.arrive(Arrival::default()));
    // Depth 2: 1 + 2 × 0.5 = 2 per visitor ahead.
    assert_eq!(room.skip_cost_for(Some(&front.token)), 0.0);
    assert_eq!(room.skip_cost_for(Some(&back.token)), 2.0);
    assert_eq!(room.skip_cost_for(None), 4.0);
    assert_eq!(room.skip_cost_for(Some("not a ticket")), 4.0);
    assert_eq!(room.skip_cost_for(Some(&"ab".repeat(16))), 4.0);
    // Asking is not a sign of life: the ticket's first poll still counts as its first.
    assert!(matches!(
        room.poll(Some(&back.token)),
        PollOutcome::Waiting { position: 2, .. }
    ));
    // A VIP pass holder skips nobody.
    room.add_pass("vip-pass", Duration::from_secs(3_600));
    let vip = waiting(room.arrive(Arrival {
        pass_cookie: Some("vip-pass"),
        ..Arrival::default()
    }));
    assert_eq!(room.skip_cost_for(Some(&vip.token)), 0.0);
    // Let in: nobody ahead.
    drop(held);
    advance(Duration::from_secs(2)).await;
    assert_eq!(room.skip_cost_for(Some(&vip.token)), 0.0);
    // Pricing off: free.
    room.reconfigure(settings(1));
    assert_eq!(room.skip_cost_for(Some(&back.token)), 0.0);
    assert_eq!(room.skip_cost_for(None), 0.0);
}

#[tokio::test(start_paused = true)]
async fn shrinking_cap_with_holders_never_over_admits() {
    let room = Room::new(settings(4));
    let holders: Vec<PageSlot> = {
        let mut slots = Vec::new();
        for _ in 0..4 {
            slots.push(enter(&room).await);
        }
        slots
    };
    room.reconfigure(settings(1));
    let waiter = waiting(room.arrive(Arrival::default()));
    drop(holders);
    assert_eq!(room.shared.gate.in_use(), 0);
    let _inside = slot(&room, room.arrive(with_ticket(&waiter.token))).await;
    assert!(room.shared.gate.try_acquire().is_none());
    assert_accounting(&room, 1);
}

/// Cap 1 and a ready grace of 20 s within a 5-minute ticket lifetime.
fn lapsing(cap: u32) -> RoomSettings {
    RoomSettings {
        token_ttl: Duration::from_secs(300),
        ready_grace: Duration::from_secs(20),
        ..settings(cap)
    }
}

/// Polls `token` every 3 s for `seconds`, reaping as the reaper would; the last outcome.
async fn keep_polling(room: &Room, token: &str, seconds: u64) -> PollOutcome {
    let mut last = room.poll(Some(token));
    for _ in 0..seconds / 3 {
        advance(Duration::from_secs(3)).await;
        room.reap_now();
        last = room.poll(Some(token));
    }
    last
}

#[tokio::test(start_paused = true)]
async fn a_ready_visitor_who_stays_away_passes_their_place_on_after_the_ready_grace() {
    for (ready_grace, lapses) in [(Duration::from_secs(20), true), (Duration::ZERO, false)] {
        let room = Room::new(RoomSettings {
            ready_grace,
            ..lapsing(1)
        });
        let held = enter(&room).await;
        let away = waiting(room.arrive(Arrival::default()));
        let present = waiting(room.arrive(Arrival::default()));
        assert_eq!(position(room.poll(Some(&away.token))), 1);
        assert_eq!(position(room.poll(Some(&present.token))), 2);
        drop(held);
        // `away` is ready but never comes back; `present` keeps polling.
        let outcome = keep_polling(&room, &present.token, 30).await;
        let stats = room.stats();
        if lapses {
            assert_eq!(outcome, PollOutcome::Ready, "the place passed on");
            assert_eq!((stats.lapsed_total, stats.evicted_total), (1, 0));
        } else {
            assert_eq!(position(outcome), 1, "held until the ticket lifetime ends");
            assert_eq!(stats.lapsed_total, 0);
        }
        assert_accounting(&room, 0);
    }
}

#[tokio::test(start_paused = true)]
async fn a_ready_visitor_who_keeps_polling_never_lapses() {
    let room = Room::new(lapsing(1));
    let held = enter(&room).await;
    let visitor = waiting(room.arrive(Arrival::default()));
    let behind = waiting(room.arrive(Arrival::default()));
    drop(held);
    // A slow reload: the page keeps hearing `ready` for a minute before it comes back.
    assert_eq!(
        keep_polling(&room, &visitor.token, 60).await,
        PollOutcome::Ready
    );
    assert_eq!(room.stats().lapsed_total, 0);
    let _slot = slot(&room, room.arrive(with_ticket(&visitor.token))).await;
    assert_eq!(position(room.poll(Some(&behind.token))), 1);
}

#[tokio::test(start_paused = true)]
async fn a_lapsed_visitor_who_comes_back_goes_to_the_front() {
    let room = Room::new(lapsing(1));
    let held = enter(&room).await;
    let away = waiting(room.arrive(Arrival::default()));
    let next = waiting(room.arrive(Arrival::default()));
    let last = waiting(room.arrive(Arrival::default()));
    drop(held);
    advance(Duration::from_secs(18)).await;
    assert_eq!(position(room.poll(Some(&next.token))), 1);
    assert_eq!(position(room.poll(Some(&last.token))), 2);
    advance(Duration::from_secs(3)).await;
    assert_eq!(room.reap_now(), 1);
    // `next` got the place and is inside; `last` is first in line.
    let inside = slot(&room, room.arrive(with_ticket(&next.token))).await;
    assert_eq!(position(room.poll(Some(&last.token))), 1);
    // A lapsed ticket is unknown to the status poll, so the page reloads into the room.
    assert_eq!(room.poll(Some(&away.token)), PollOutcome::Ready);
    let back = waiting(room.arrive(with_ticket(&away.token)));
    assert_eq!(back.token, away.token, "same ticket cookie");
    assert_eq!(back.position, 1);
    advance(Duration::from_secs(2)).await;
    assert_eq!(position(room.poll(Some(&last.token))), 2);
    let stats = room.stats();
    assert_eq!((stats.lapsed_total, stats.rejoined_total), (1, 1));
    assert_accounting(&room, 1);
    drop(inside);
    assert_eq!(room.poll(Some(&away.token)), PollOutcome::Ready);
    assert_eq!(position(room.poll(Some(&last.token))), 1);
    let _slot = slot(&room, room.arrive(with_ticket(&away.token))).await;
    assert_accounting(&room, 1);
}

#[tokio::test(start_paused = true)]
async fn a_lapsed_visitor_enters_at_once_when_the_window_has_room() {
    let room = Room::new(lapsing(1));
    let held = enter(&room).await;
    let away = waiting(room.arrive(Arrival::default()));
    drop(held);
    advance(Duration::from_secs(21)).await;
    assert_eq!(room.reap_now(), 1);
    assert_eq!(room.stats().live_queue_depth, 0);
    let _slot = slot(&room, room.arrive(with_ticket(&away.token))).await;
    assert_eq!(room.stats().rejoined_total, 1);
    assert_accounting(&room, 1);
}

#[tokio::test(start_paused = true)]
async fn a_lapsed_claim_ends_with_the_ticket_lifetime_a_removal_or_a_ban() {
    let address: IpAddr = "203.0.113.9".parse().unwrap();
    for ending in ["lifetime", "removal", "ban"] {
        let room = Room::new(lapsing(1));
        let held = enter(&room).await;
        let away = waiting(room.arrive(Arrival {
            client: Some(address),
            ..Arrival::default()
        }));
        let behind = waiting(room.arrive(Arrival::default()));
        drop(held);
        advance(Duration::from_secs(18)).await;
        room.poll(Some(&behind.token));
        advance(Duration::from_secs(3)).await;
        assert_eq!(room.reap_now(), 1);
        let _inside = slot(&room, room.arrive(with_ticket(&behind.token))).await;
        let other = waiting(room.arrive(Arrival::default()));
        match ending {
            "removal" => {
                assert!(room.remove_token(&away.token));
                assert!(!room.remove_token(&away.token), "removed once");
            }
            "ban" => assert_eq!(room.remove_clients(|client| client == address), 1),
            _ => {
                advance(Duration::from_secs(301)).await;
                room.reap_now();
                // The reaper dropped the claim along with the expired `other` ticket.
                assert_eq!(room.stats().live_queue_depth, 0);
            }
        }
        let back = waiting(room.arrive(with_ticket(&away.token)));
        assert_ne!(back.token, away.token, "{ending}: a new ticket");
        let expected_position = if ending == "lifetime" { 1 } else { 2 };
        assert_eq!(
            back.position, expected_position,
            "{ending}: at the back: {other:?}"
        );
        assert_eq!(room.stats().rejoined_total, 0);
        assert_accounting(&room, 1);
    }
}

#[test]
fn the_reaper_runs_often_enough_for_both_graces() {
    let secs = Duration::from_secs;
    let with = |first_poll_grace, ready_grace| RoomSettings {
        first_poll_grace,
        ready_grace,
        reaper: secs(36),
        ..RoomSettings::default()
    };
    assert_eq!(
        with(Duration::ZERO, Duration::ZERO).reaper_period(),
        secs(36)
    );
    assert_eq!(with(secs(30), Duration::ZERO).reaper_period(), secs(30));
    assert_eq!(with(Duration::ZERO, secs(30)).reaper_period(), secs(5));
    assert_eq!(with(secs(30), secs(10)).reaper_period(), secs(5));
    assert_eq!(with(secs(60), secs(120)).reaper_period(), secs(20));
    assert_eq!(with(secs(60), secs(600)).reaper_period(), secs(36));
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        Arrive,
        Return(usize),
        Release(usize),
        Remove(usize),
        Reap(u64),
        SetCap(u32),
        Poll(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => Just(Op::Arrive),
            3 => any::<usize>().prop_map(Op::Return),
            3 => any::<usize>().prop_map(Op::Release),
            1 => any::<usize>().prop_map(Op::Remove),
            1 => (0u64..40).prop_map(Op::Reap),
            1 => (1u32..5).prop_map(Op::SetCap),
            2 => any::<usize>().prop_map(Op::Poll),
        ]
    }

    fn traffic_settings(cap: u32, max_queue: u64) -> RoomSettings {
        RoomSettings {
            max_queue,
            first_poll_grace: Duration::from_secs(10),
            ready_grace: Duration::from_secs(10),
            ..settings(cap)
        }
    }

    async fn run(room: &Room, ops: Vec<Op>, max_queue: u64) -> Result<(), TestCaseError> {
        let mut tokens: Vec<String> = Vec::new();
        let mut slots: Vec<PageSlot> = Vec::new();
        for op in ops {
            match op {
                Op::Arrive | Op::Return(_) => {
                    let cookie = match op {
                        Op::Return(i) if !tokens.is_empty() => {
                            Some(tokens.remove(i % tokens.len()))
                        }
                        _ => None,
                    };
                    match room.arrive(Arrival {
                        ticket_cookie: cookie.as_deref(),
                        ..Arrival::default()
                    }) {
                        Decision::Admit(claimed) => match room.admit(claimed).await {
                            AdmitResult::Admitted(slot) => slots.push(slot),
                            AdmitResult::Requeued(waiting) => {
                                prop_assert!(waiting.position >= 1);
                                tokens.push(waiting.token);
                            }
                        },
                        Decision::Wait(waiting) => {
                            prop_assert!(waiting.position >= 1);
                            tokens.push(waiting.token);
                        }
                        Decision::Full => {
                            prop_assert!(max_queue > 0, "no breaker configured");
                            let tokens = &room.shared.tokens;
                            prop_assert!(tokens.proven() + tokens.unproven() >= max_queue);
                        }
                        Decision::AddressFull => prop_assert!(false, "no address bound configured"),
                    }
                    if max_queue > 0 {
                        prop_assert!(room.shared.tokens.unproven() <= max_queue);
                    }
                }
                Op::Release(i) if !slots.is_empty() => {
                    drop(slots.swap_remove(i % slots.len()));
                }
                Op::Remove(i) if !tokens.is_empty() => {
                    let token = tokens.swap_remove(i % tokens.len());
                    room.remove_token(&token);
                }
                Op::Reap(seconds) => {
                    advance(Duration::from_secs(seconds)).await;
                    room.reap_now();
                }
                Op::SetCap(cap) => room.reconfigure(traffic_settings(cap, max_queue)),
                Op::Poll(i) if !tokens.is_empty() => {
                    advance(Duration::from_millis(1_001)).await;
                    match room.poll(Some(&tokens[i % tokens.len()])) {
                        PollOutcome::Waiting { position, .. }
                        | PollOutcome::Throttled { position } => {
                            prop_assert!(position >= 1)
                        }
                        PollOutcome::Ready => {}
                        PollOutcome::CookiesRequired => prop_assert!(false, "cookie was sent"),
                    }
                }
                _ => {}
            }
            let stats = room.stats();
            prop_assert_eq!(
                stats.issued,
                stats.now_serving + stats.ghosts + stats.live_queue_depth + slots.len() as u64
            );
            prop_assert_eq!(stats.occupancy, slots.len() as u64);
            prop_assert_eq!(
                room.shared.tokens.unproven(),
                room.shared.tokens.unproven_by_scan()
            );
            for row in room.line_front(usize::MAX >> 1) {
                prop_assert!(row.ready || row.position >= 1);
            }
        }
        drop(slots);
        let stats = room.stats();
        prop_assert_eq!(
            stats.issued,
            stats.now_serving + stats.ghosts + stats.live_queue_depth
        );
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn random_room_traffic_keeps_every_ticket_accounted(
            cap in 1u32..4,
            max_queue in prop_oneof![Just(0u64), 1u64..4],
            ops in proptest::collection::vec(op(), 1..80),
        ) {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .start_paused(true)
                .build()
                .unwrap();
            runtime.block_on(async {
                let room = Room::new(traffic_settings(cap, max_queue));
                run(&room, ops, max_queue).await
            })?;
        }
    }
}

#[tokio::test(start_paused = true)]
async fn lent_page_slots_size_the_gate_and_a_shortage_nudges_the_lender() {
    let room = Room::new(settings(4));
    let pool = room.share_page_slots();
    assert_eq!(room.page_slots(), (0, 0), "nothing until something is lent");
    room.set_page_slots(1);
    let first = enter(&room).await;
    // The cap says 4, the lease 1: the next admitted visitor waits, counted and announced.
    let second = room.arrive(Arrival::default());
    let waiter = {
        let room = Arc::clone(&room);
        tokio::spawn(async move { room.admit(admission(second)).await })
    };
    tokio::time::timeout(Duration::from_millis(10), pool.nudged())
        .await
        .expect("the shortage nudged the lender");
    assert_eq!(pool.waiting(), 1);
    assert!(room.is_busy(), "no lent slot free is busy");
    // A cap change leaves the gate to the lender.
    room.reconfigure(settings(8));
    assert_eq!(room.page_slots(), (1, 1));
    room.set_page_slots(2);
    assert!(matches!(waiter.await.unwrap(), AdmitResult::Admitted(_)));
    assert_eq!(pool.waiting(), 0);
    // Shrinking below those in use leaves debt: nobody new until both have ended.
    room.set_page_slots(1);
    pool.set_nudge_on_release(true);
    drop(first);
    tokio::time::timeout(Duration::from_millis(10), pool.nudged())
        .await
        .expect("a release nudges while others wait elsewhere");
    assert_eq!(room.page_slots(), (1, 0));
}
