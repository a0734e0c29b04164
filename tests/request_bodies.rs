//! Request bodies as an attacker sends them: uploads that dribble, stall, never end or are too
//! large, to pages and to the admin API. A page's body is taken in whole before the request may
//! take a page slot, so the origin's slots never wait on a client; Concert's own reads of a
//! body are bounded in size and time, and an admin body is not read before its token is checked.

mod support;

use std::path::Path;
use std::time::Duration;

use support::origins::{self, Origin};
use support::{
    concert, concert_adjusted, concert_with_env, eventually, plain_client, room_stats, url,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

const TOKEN: &str = "request-bodies-admin-token";

/// Concert in front of `origin` with `args`, its body progress deadline shortened to `pause`.
async fn concert_with_pause(origin: &Origin, args: &[&str], pause: Duration) -> concert::Running {
    let upstream = origin.url();
    let mut argv = vec!["-upstream", upstream.as_str()];
    argv.extend_from_slice(args);
    concert_adjusted(&argv, &[("CONCERT_ADMIN_TOKEN", TOKEN)], |config| {
        config.body_progress_timeout = pause;
    })
    .await
}

/// Opens a connection and sends a request head (the body is up to the caller).
async fn send_head(running: &concert::Running, head: &str) -> TcpStream {
    let mut stream = TcpStream::connect(running.addr).await.unwrap();
    stream.write_all(head.as_bytes()).await.unwrap();
    stream
}

/// Reads what the server sends until it closes or `limit` passes.
async fn answer_of(stream: &mut TcpStream, limit: Duration) -> String {
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(limit, stream.read_to_end(&mut answer)).await;
    String::from_utf8_lossy(&answer).into_owned()
}

/// Reads until the first answer head is complete (or `limit` passes), without waiting for the
/// connection to close.
async fn head_of(stream: &mut TcpStream, limit: Duration) -> String {
    let mut seen = Vec::new();
    let read = async {
        let mut buffer = [0u8; 4096];
        while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
            match stream.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(read) => seen.extend_from_slice(&buffer[..read]),
            }
        }
    };
    let _ = tokio::time::timeout(limit, read).await;
    String::from_utf8_lossy(&seen).into_owned()
}

/// The JSON body of an echo origin's answer within a raw HTTP/1.1 answer (after any
/// `100 Continue`).
fn echoed(answer: &str) -> serde_json::Value {
    let body = answer
        .rsplit_once("\r\n\r\n")
        .map(|(_, body)| body)
        .unwrap_or_default();
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {answer}"))
}

/// Files this process holds open inside `dir` (a spooled body's file has no name, but its
/// descriptor still points into the directory).
fn open_files_in(dir: &Path) -> usize {
    std::fs::read_dir("/proc/self/fd")
        .map(|entries| {
            entries
                .filter_map(|entry| std::fs::read_link(entry.ok()?.path()).ok())
                .filter(|target| target.starts_with(dir))
                .count()
        })
        .unwrap_or(0)
}

fn chunk(data: &[u8]) -> Vec<u8> {
    let mut framed = format!("{:x}\r\n", data.len()).into_bytes();
    framed.extend_from_slice(data);
    framed.extend_from_slice(b"\r\n");
    framed
}

/// The attack: a client declares a form post to a room of one slot and sends it a little at a
/// time, to keep the slot. What must happen: the slot stays free for everyone else while the
/// body dribbles in, and the origin sees the post only once it is complete, with its length.
#[tokio::test]
async fn a_dribbled_upload_to_a_full_room_never_holds_the_origin_slot() {
    let origin = origins::echo_origin();
    let concert = concert(&["-upstream", &origin.url(), "-cap", "1"]).await;
    let mut upload = send_head(
        &concert,
        "POST /wp-admin/post.php HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n",
    )
    .await;
    let piece = [b'a'; 100];
    let client = plain_client();
    for round in 0..20 {
        upload.write_all(&chunk(&piece)).await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        if round % 5 == 4 {
            // Another visitor gets the only slot while the upload is under way.
            let page = client.get(url(&concert, "/")).send().await.unwrap();
            assert_eq!(page.status(), 200);
            assert!(page.text().await.unwrap().contains("\"method\":\"GET\""));
        }
    }
    assert!(
        origin.paths().iter().all(|path| path == "/"),
        "the origin saw the upload early: {:?}",
        origin.paths()
    );
    assert!(support::room_empties(&concert).await);

    upload.write_all(b"0\r\n\r\n").await.unwrap();
    let answer = answer_of(&mut upload, Duration::from_secs(10)).await;
    assert!(answer.contains("HTTP/1.1 200 "), "{answer}");
    let seen = echoed(&answer);
    assert_eq!(seen["path"], "/wp-admin/post.php");
    assert_eq!(seen["body"].as_str().map(str::len), Some(2_000));
    assert_eq!(seen["headers"]["content-length"][0], "2000");
    assert!(seen["headers"].get("transfer-encoding").is_none(), "{seen}");
    assert!(seen["headers"].get("expect").is_none(), "{seen}");
    assert_eq!(
        origin.paths().last().map(String::as_str),
        Some("/wp-admin/post.php")
    );
}

/// The attack: bodies larger than the site takes, declared or sent chunked. What must happen:
/// 413, at once for a declared length, and nothing reaches the origin.
#[tokio::test]
async fn a_body_over_max_body_gets_413_without_reaching_the_origin() {
    let origin = origins::echo_origin();
    let concert = concert(&["-upstream", &origin.url(), "-max-body", "1k"]).await;

    // Declared and never sent: answered without waiting for it.
    let started = Instant::now();
    let mut declared = send_head(
        &concert,
        "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 1073741824\r\nExpect: 100-continue\r\n\r\n",
    )
    .await;
    let answer = head_of(&mut declared, Duration::from_secs(5)).await;
    assert!(answer.starts_with("HTTP/1.1 413 "), "{answer}");
    assert!(started.elapsed() < Duration::from_secs(2));

    // Chunked: refused as soon as it passes the limit.
    let mut chunked = send_head(
        &concert,
        "POST /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nAccept: application/json\r\n\r\n",
    )
    .await;
    for _ in 0..3 {
        chunked.write_all(&chunk(&[b'z'; 400])).await.unwrap();
    }
    let answer = answer_of(&mut chunked, Duration::from_secs(5)).await;
    assert!(answer.starts_with("HTTP/1.1 413 "), "{answer}");
    assert!(
        answer.to_ascii_lowercase().contains("connection: close"),
        "{answer}"
    );
    assert_eq!(origin.hits(), 0);

    // At the limit it goes through.
    let fits = plain_client()
        .post(url(&concert, "/upload"))
        .body(vec![b'y'; 1024])
        .send()
        .await
        .unwrap();
    assert_eq!(fits.status(), 200);
    assert_eq!(origin.hits(), 1);
}

/// The attack: an upload that keeps sending but never finishes, and one that stops sending.
/// What must happen: 408 at the overall deadline, and at the progress deadline for the one
/// that went quiet; the origin never sees either.
#[tokio::test]
async fn an_upload_past_its_deadlines_gets_408() {
    let origin = origins::echo_origin();
    let pause = Duration::from_secs(1);
    let concert = concert_with_pause(&origin, &["-upload-timeout", "2s"], pause).await;

    let started = Instant::now();
    let mut endless = send_head(
        &concert,
        "POST /form HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n",
    )
    .await;
    let mut answer = String::new();
    while started.elapsed() < Duration::from_secs(6) {
        if endless.write_all(b"0123456789").await.is_err() {
            break;
        }
        let mut buffer = [0u8; 1024];
        if let Ok(Ok(read)) =
            tokio::time::timeout(Duration::from_millis(300), endless.read(&mut buffer)).await
        {
            answer = String::from_utf8_lossy(&buffer[..read]).into_owned();
            break;
        }
    }
    assert!(answer.starts_with("HTTP/1.1 408 "), "{answer}");
    let took = started.elapsed();
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(4),
        "{took:?}"
    );

    let started = Instant::now();
    let mut quiet = send_head(
        &concert,
        "POST /form HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nhalf",
    )
    .await;
    let answer = head_of(&mut quiet, Duration::from_secs(5)).await;
    assert!(answer.starts_with("HTTP/1.1 408 "), "{answer}");
    let took = started.elapsed();
    assert!(took >= pause && took < Duration::from_secs(2), "{took:?}");
    assert_eq!(origin.hits(), 0);
    assert_eq!(concert.app.room.stats().occupancy, 0);
}

/// An operator's opt-out: on `-unbuffered-upload-paths` the body streams, so the origin has
/// the request (and the page slot is held) before the body is complete.
#[tokio::test]
async fn an_unbuffered_upload_path_streams_the_body_to_the_origin() {
    let origin = origins::echo_origin();
    let concert = concert(&[
        "-upstream",
        &origin.url(),
        "-unbuffered-upload-paths",
        "/stream-in/*",
    ])
    .await;
    let mut upload = send_head(
        &concert,
        "POST /stream-in/big HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\nConnection: close\r\n\r\nhello",
    )
    .await;
    assert!(eventually(Duration::from_secs(5), || origin.hits() == 1).await);
    assert_eq!(concert.app.room.stats().occupancy, 1);
    upload.write_all(b"world").await.unwrap();
    let answer = answer_of(&mut upload, Duration::from_secs(5)).await;
    assert_eq!(echoed(&answer)["body"], "helloworld");

    // Elsewhere the same upload is taken in first.
    let mut buffered = send_head(
        &concert,
        "POST /stream-out HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\nConnection: close\r\n\r\nhello",
    )
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(origin.hits(), 1);
    buffered.write_all(b"world").await.unwrap();
    let answer = answer_of(&mut buffered, Duration::from_secs(5)).await;
    assert_eq!(echoed(&answer)["body"], "helloworld");
}

/// A body too large for memory waits in a nameless file of the private spool directory, which
/// is closed (and so gone) when the request ends: answered, or abandoned mid-upload.
#[tokio::test]
async fn a_spooled_upload_leaves_no_file_behind() {
    let origin = origins::echo_origin();
    let concert = concert(&["-upstream", &origin.url()]).await;
    let spool = concert.app.upload_spool_dir().unwrap().to_path_buf();
    assert_eq!(open_files_in(&spool), 0);
    let piece = vec![b'q'; 64 * 1024];
    let total = 16 * piece.len();

    let mut upload = send_head(
        &concert,
        &format!("POST /media HTTP/1.1\r\nHost: x\r\nContent-Length: {total}\r\nConnection: close\r\n\r\n"),
    )
    .await;
    for _ in 0..15 {
        upload.write_all(&piece).await.unwrap();
    }
    assert!(eventually(Duration::from_secs(5), || open_files_in(&spool) == 1).await);
    assert_eq!(
        std::fs::read_dir(&spool).unwrap().count(),
        0,
        "the file has no name"
    );
    assert_eq!(origin.hits(), 0);
    upload.write_all(&piece).await.unwrap();
    let answer = answer_of(&mut upload, Duration::from_secs(10)).await;
    let seen = echoed(&answer);
    assert_eq!(seen["body"].as_str().map(str::len), Some(total));
    assert_eq!(seen["headers"]["content-length"][0], total.to_string());
    assert!(eventually(Duration::from_secs(5), || open_files_in(&spool) == 0).await);

    // Abandoned half way: the file goes with the connection.
    let mut abandoned = send_head(
        &concert,
        &format!("POST /media HTTP/1.1\r\nHost: x\r\nContent-Length: {total}\r\n\r\n"),
    )
    .await;
    for _ in 0..8 {
        abandoned.write_all(&piece).await.unwrap();
    }
    assert!(eventually(Duration::from_secs(5), || open_files_in(&spool) == 1).await);
    drop(abandoned);
    assert!(eventually(Duration::from_secs(5), || open_files_in(&spool) == 0).await);
    assert_eq!(origin.hits(), 1);
}

/// The attack: admin calls without the token that declare a body and never send it, or send
/// megabytes of it. What must happen: 401 at once, without reading the body (404 while no
/// token is configured), so nothing is held.
#[tokio::test]
async fn an_admin_call_without_the_token_is_refused_before_its_body() {
    let origin = origins::fast_origin();
    let with_token = concert_with_env(
        &["-upstream", &origin.url()],
        &[("CONCERT_ADMIN_TOKEN", TOKEN)],
    )
    .await;
    for path in ["/_room/cap", "/_room/abuse"] {
        let started = Instant::now();
        let mut stream = send_head(
            &with_token,
            &format!("POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2000000\r\n\r\n"),
        )
        .await;
        let answer = head_of(&mut stream, Duration::from_secs(5)).await;
        assert!(answer.starts_with("HTTP/1.1 401 "), "{path}: {answer}");
        assert!(started.elapsed() < Duration::from_secs(2), "{path}");
    }
    let without_token = concert(&["-upstream", &origin.url()]).await;
    let started = Instant::now();
    let mut stream = send_head(
        &without_token,
        "POST /_room/cap HTTP/1.1\r\nHost: x\r\nContent-Length: 2000000\r\n\r\n",
    )
    .await;
    let answer = head_of(&mut stream, Duration::from_secs(5)).await;
    assert!(answer.starts_with("HTTP/1.1 404 "), "{answer}");
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(origin.hits(), 0);
}

/// The attack: a token holder's client (or a stolen token) sends an admin body far larger than
/// any call needs, or starts one and stalls. What must happen: 413 over 64 KiB, at once for a
/// declared length; 408 once the body has paused for the progress deadline.
#[tokio::test]
async fn admin_bodies_are_bounded_in_size_and_time() {
    let origin = origins::fast_origin();
    let pause = Duration::from_secs(1);
    let concert = concert_with_pause(&origin, &[], pause).await;
    let auth = format!("Authorization: Bearer {TOKEN}\r\n");

    let mut declared = send_head(
        &concert,
        &format!("POST /_room/cap HTTP/1.1\r\nHost: x\r\n{auth}Content-Length: 65537\r\n\r\n"),
    )
    .await;
    let answer = answer_of(&mut declared, Duration::from_secs(5)).await;
    assert!(answer.starts_with("HTTP/1.1 413 "), "{answer}");

    let mut chunked = send_head(
        &concert,
        &format!(
            "POST /_room/abuse HTTP/1.1\r\nHost: x\r\n{auth}Transfer-Encoding: chunked\r\n\r\n"
        ),
    )
    .await;
    for _ in 0..2 {
        chunked.write_all(&chunk(&[b' '; 30_000])).await.unwrap();
    }
    // Over the limit by a little, without the chunk's line end: nothing is left unread.
    chunked.write_all(b"1770\r\n").await.unwrap();
    chunked.write_all(&[b' '; 6_000]).await.unwrap();
    let answer = answer_of(&mut chunked, Duration::from_secs(5)).await;
    assert!(answer.starts_with("HTTP/1.1 413 "), "{answer}");

    let started = Instant::now();
    let mut stalled = send_head(
        &concert,
        &format!(
            "POST /_room/cap HTTP/1.1\r\nHost: x\r\n{auth}Content-Length: 20\r\n\r\n{{\"cap\":"
        ),
    )
    .await;
    let answer = head_of(&mut stalled, Duration::from_secs(5)).await;
    assert!(answer.starts_with("HTTP/1.1 408 "), "{answer}");
    let took = started.elapsed();
    assert!(took >= pause && took < Duration::from_secs(3), "{took:?}");

    // A normal call still works, and only it changed anything.
    let changed = plain_client()
        .post(url(&concert, "/_room/cap"))
        .bearer_auth(TOKEN)
        .body(r#"{"cap":9}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(changed.status(), 200);
    assert_eq!(concert.app.room.stats().cap, 9);
}

/// The attack: many slow uploaders each park a large body in the buffer, to fill the disk the
/// data dir (bans, settings) lives on. What must happen: the buffer on disk has a limit; an
/// upload that would pass it gets 503 with `Retry-After`, and the room comes back as the
/// buffered uploads finish.
#[tokio::test]
async fn uploads_cannot_fill_the_disk_past_the_buffer_limit() {
    let origin = origins::echo_origin();
    let concert = concert(&["-upstream", &origin.url(), "-upload-disk-limit", "100k"]).await;
    let head =
        "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 200000\r\nConnection: close\r\n\r\n";
    // 80 kB goes past the 64 KiB kept in memory: it takes 80 kB of the 100 KiB on disk.
    let mut parked = send_head(&concert, head).await;
    parked.write_all(&[b'a'; 80_000]).await.unwrap();
    assert!(
        eventually(Duration::from_secs(5), || concert.app.upload_spool_in_use()
            >= 80_000)
        .await
    );
    let mut refused = send_head(&concert, head).await;
    refused.write_all(&[b'b'; 80_000]).await.unwrap();
    let answer = answer_of(&mut refused, Duration::from_secs(5)).await;
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(
        answer.to_ascii_lowercase().contains("retry-after: 10"),
        "{answer}"
    );
    // The parked upload completes and frees its room; the next one fits.
    parked.write_all(&[b'a'; 120_000]).await.unwrap();
    let done = answer_of(&mut parked, Duration::from_secs(5)).await;
    assert!(done.starts_with("HTTP/1.1 200"), "{done}");
    assert!(
        eventually(Duration::from_secs(5), || concert.app.upload_spool_in_use()
            == 0)
        .await
    );
    let mut again = send_head(&concert, head).await;
    again.write_all(&[b'c'; 80_000]).await.unwrap();
    assert!(
        eventually(Duration::from_secs(5), || concert.app.upload_spool_in_use()
            > 0)
        .await
    );
    again.write_all(&[b'c'; 120_000]).await.unwrap();
    let answer = answer_of(&mut again, Duration::from_secs(5)).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let stats = room_stats(&concert).await;
    assert_eq!(stats["upload_buffered_bytes"], 0);
}
