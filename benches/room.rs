//! Waiting-room costs on the request path: admission + release with a free room, position lookups
//! while a long line waits, and a `/queue/status` answer (poll + JSON), at several line lengths;
//! and the pass over the line that removes a banned client's waiting visitors.

use std::hint::black_box;
use std::time::Duration;

use concert::room::{AdmitResult, Arrival, Decision, Room, RoomSettings};
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};

fn settings(cap: u32) -> RoomSettings {
    RoomSettings {
        cap,
        max_queue: 0,
        max_per_address: 0,
        token_ttl: Duration::from_secs(300),
        first_poll_grace: Duration::ZERO,
        ready_grace: Duration::ZERO,
        reaper: Duration::from_secs(36),
        retry_after_secs: 5,
        pricing: None,
    }
}

fn arrival() -> Arrival<'static> {
    Arrival {
        ticket_cookie: None,
        pass_cookie: None,
        client: Some("203.0.113.7".parse().unwrap()),
    }
}

fn admission_and_release(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let room = runtime.block_on(async { Room::new(settings(1_000_000)) });
    c.bench_function("room/admit_and_release_free_room", |b| {
        b.iter(|| {
            runtime.block_on(async {
                let Decision::Admit(admission) = room.arrive(arrival()) else {
                    panic!("a free room admits")
                };
                let AdmitResult::Admitted(slot) = room.admit(admission).await else {
                    panic!("a free slot is taken at once")
                };
                drop(black_box(slot));
            })
        })
    });
}

/// A room with one slot taken and `queued` visitors waiting; every tenth left (a ghost).
fn long_line(
    runtime: &tokio::runtime::Runtime,
    queued: usize,
) -> (std::sync::Arc<Room>, Vec<String>, concert::room::PageSlot) {
    runtime.block_on(async {
        let room = Room::new(settings(1));
        let Decision::Admit(admission) = room.arrive(arrival()) else {
            panic!()
        };
        let AdmitResult::Admitted(slot) = room.admit(admission).await else {
            panic!()
        };
        let mut tokens = Vec::with_capacity(queued);
        for _ in 0..queued {
            match room.arrive(arrival()) {
                Decision::Wait(waiting) => tokens.push(waiting.token),
                _ => panic!("the line is unlimited"),
            }
        }
        for token in tokens.iter().step_by(10) {
            room.remove_token(token);
        }
        (room, tokens, slot)
    })
}

fn position_lookup(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut group = c.benchmark_group("room/poll_position");
    for queued in [1_000usize, 10_000, 100_000, 1_000_000] {
        let (room, tokens, _slot) = long_line(&runtime, queued);
        let probe = tokens[queued / 2 + 1].clone();
        group.bench_with_input(BenchmarkId::from_parameter(queued), &queued, |b, _| {
            b.iter(|| black_box(room.poll(Some(&probe))))
        });
    }
    group.finish();
}

fn queue_status_answer(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (room, tokens, _slot) = long_line(&runtime, 100_000);
    let probe = tokens[50_001].clone();
    c.bench_function("queue_status/poll_and_json_100k", |b| {
        b.iter(|| {
            let outcome = room.poll(Some(&probe));
            black_box(concert::endpoints::queue_status::status_body(&outcome))
        })
    });
    // Arrive and leave again, so the line stays at 100,000 however long criterion runs.
    c.bench_function("room/arrive_and_leave_100k_line", |b| {
        b.iter(|| {
            if let Decision::Wait(waiting) = room.arrive(arrival()) {
                black_box(room.remove_token(&waiting.token));
            }
        })
    });
}

/// What a ban costs the line: one pass over every waiting visitor looking for the banned
/// client's tickets (here it has none, so the line stays as it is).
fn ban_pass_over_the_line(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let banned: std::net::IpAddr = "198.51.100.1".parse().unwrap();
    let mut group = c.benchmark_group("room/ban_pass");
    group.sample_size(10);
    for queued in [100_000usize, 1_000_000] {
        let (room, _tokens, _slot) = long_line(&runtime, queued);
        group.bench_with_input(BenchmarkId::from_parameter(queued), &queued, |b, _| {
            b.iter(|| black_box(room.remove_clients(|client| client == banned)))
        });
    }
    group.finish();
}

/// One reaper pass over a long line in which nobody is due: the cost the ready grace's short
/// reaper period (5 s by default) adds.
fn reaper_pass_over_the_line(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut group = c.benchmark_group("room/reaper_pass");
    group.sample_size(10);
    for queued in [100_000usize, 1_000_000] {
        let (room, _tokens, _slot) = long_line(&runtime, queued);
        room.reconfigure(RoomSettings {
            ready_grace: Duration::from_secs(30),
            ..settings(1)
        });
        group.bench_with_input(BenchmarkId::from_parameter(queued), &queued, |b, _| {
            b.iter(|| black_box(room.reap_now()))
        });
    }
    group.finish();
}

criterion_group!(
    benches,
    admission_and_release,
    position_lookup,
    queue_status_answer,
    ban_pass_over_the_line,
    reaper_pass_over_the_line
);
criterion_main!(benches);
