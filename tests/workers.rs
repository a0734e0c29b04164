//! Serving on several workers (`-workers N`): each worker a thread (`concert-wN`) with a
//! runtime of its own, all accepting from one listening socket, all stopping together.

mod support;

use std::collections::HashMap;
use std::time::Duration;

use concert::config::{self, Loaded};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// Names of this process's threads that are serving workers.
fn worker_threads() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir("/proc/self/task")
        .expect("Linux /proc")
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .map(|name| name.trim().to_owned())
        .filter(|name| name.starts_with("concert-w"))
        .collect();
    names.sort();
    names
}

/// One keep-alive exchange on a raw connection; the status line's code.
async fn status_of(stream: &mut tokio::net::TcpStream, path: &str) -> u16 {
    let request = format!("GET {path} HTTP/1.1\r\nhost: shop.test\r\n\r\n");
    let (head, _) = support::keep_alive_exchange(stream, &request).await;
    head[9..12].parse().expect("a status code")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_workers_serve_one_listener_and_stop_together() {
    let origin = support::origins::slow_origin(Duration::from_millis(20));
    let argv: Vec<String> = ["-upstream", &origin.url(), "-cap", "1000", "-data-dir="]
        .iter()
        .map(|arg| arg.to_string())
        .collect();
    let config = match config::load(&argv, &HashMap::<String, String>::new()) {
        Ok(Loaded::Run(config)) => *config,
        other => panic!("config refused: {:?}", other.err()),
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let running = concert::start_on_workers(config, Some(listener), 3)
        .await
        .expect("started");
    let addr = running.addr;
    // The calling runtime is worker 0; two threads are the others.
    assert!(
        support::eventually(Duration::from_secs(5), || {
            worker_threads() == ["concert-w1", "concert-w2"]
        })
        .await,
        "worker threads: {:?}",
        worker_threads()
    );

    // Forty keep-alive clients at once, three requests each: whichever worker accepted a
    // connection serves it to the end.
    let mut clients = Vec::new();
    for _ in 0..40 {
        clients.push(tokio::net::TcpStream::connect(addr).await.expect("connect"));
    }
    let first_round: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(client, mut stream)| {
            tokio::spawn(async move {
                let status = status_of(&mut stream, &format!("/c{client}/r0")).await;
                (stream, status)
            })
        })
        .collect();
    let mut clients = Vec::new();
    for request in first_round {
        let (stream, status) = tokio::time::timeout(Duration::from_secs(20), request)
            .await
            .expect("answered in time")
            .unwrap();
        assert_eq!(status, 200);
        clients.push(stream);
    }
    // All forty are open now, spread over the three workers: a worker holding clearly more
    // than the least busy one leaves new connections to the others.
    let open = running.app.open_connections();
    assert_eq!(open.len(), 3, "{open:?}");
    assert_eq!(open.iter().sum::<usize>(), 40, "{open:?}");
    let (least, most) = (open.iter().min().unwrap(), open.iter().max().unwrap());
    assert!(most - least <= 3, "connections per worker: {open:?}");
    let metrics = reqwest::get(format!("http://{addr}/_room/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("concert_connections{worker=\"2\"}"),
        "{metrics}"
    );

    let rounds: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(client, mut stream)| {
            tokio::spawn(async move {
                let mut statuses = Vec::new();
                for round in 1..3 {
                    statuses.push(status_of(&mut stream, &format!("/c{client}/r{round}")).await);
                }
                statuses
            })
        })
        .collect();
    for client in rounds {
        let statuses = tokio::time::timeout(Duration::from_secs(20), client)
            .await
            .expect("answered in time")
            .unwrap();
        assert_eq!(statuses, [200, 200]);
    }
    assert_eq!(origin.hits(), 120);

    // A request in flight when the stop comes is still answered, by whichever worker has it.
    let mut in_flight = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = "GET /last HTTP/1.1\r\nhost: shop.test\r\n\r\n";
    in_flight.write_all(request.as_bytes()).await.unwrap();
    assert!(
        support::eventually(Duration::from_secs(5), || origin.hits() == 121).await,
        "the last request reached the origin"
    );
    let stopping = tokio::spawn(running.shutdown());
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), in_flight.read_to_end(&mut answer))
        .await
        .expect("answered during the drain")
        .unwrap();
    assert!(
        answer.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    stopping.await.unwrap().expect("clean stop");

    // `shutdown` returns after joining every worker thread, but the kernel drops a joined
    // thread's /proc entry a moment after the join wakes (the thread id is cleared before the
    // task is reaped), so allow that moment rather than racing it.
    assert!(
        support::eventually(Duration::from_secs(2), || worker_threads().is_empty()).await,
        "every worker thread ended: {:?}",
        worker_threads()
    );
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "nobody accepts on the address any more"
    );
}
