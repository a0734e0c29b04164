//! The ceiling row of `benches/compare.sh`: a byte relay that does no HTTP work at all.
//!
//! Each client connection gets its own origin connection and bytes are copied both ways
//! unchanged, so the relay costs the kernel's share of a proxy hop and almost nothing else. No
//! real proxy can go faster on the same machine and layout; the row shows how much of the
//! table is decided by the load generator and the origin rather than by the proxy under test.
//!
//! Usage: `relay LISTEN ORIGIN [WORKERS]`, for example `relay 127.0.0.1:18084 127.0.0.1:18080 1`.

use tokio::net::{TcpListener, TcpStream};

/// Bytes copied per read, each way.
const RELAY_BUFFER: usize = 64 * 1024;

fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(listen), Some(origin)) = (args.next(), args.next()) else {
        eprintln!("usage: relay LISTEN ORIGIN [WORKERS]");
        std::process::exit(2);
    };
    let workers = match args.next().map(|text| text.parse::<usize>()) {
        None => 1,
        Some(Ok(count)) if count > 0 => count,
        Some(_) => {
            eprintln!("relay: WORKERS must be a whole number above 0");
            std::process::exit(2);
        }
    };
    // One worker gets the single-threaded runtime, as the other proxies get one worker process
    // or thread.
    let runtime = if workers == 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .enable_all()
            .build()
    };
    let runtime = match runtime {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("relay: cannot start the runtime: {error}");
            std::process::exit(1);
        }
    };
    if let Err(error) = runtime.block_on(serve(&listen, &origin)) {
        eprintln!("relay: {listen}: {error}");
        std::process::exit(1);
    }
}

async fn serve(listen: &str, origin: &str) -> std::io::Result<()> {
    let listener = TcpListener::bind(listen).await?;
    loop {
        let (mut client, _) = match listener.accept().await {
            Ok(accepted) => accepted,
            // Out of descriptors or a connection reset before accept: keep serving the rest.
            Err(_) => continue,
        };
        let origin = origin.to_string();
        tokio::spawn(async move {
            let Ok(mut upstream) = TcpStream::connect(&origin).await else {
                return;
            };
            // Proxies under test all disable Nagle on both sides; so does the ceiling.
            let _ = client.set_nodelay(true);
            let _ = upstream.set_nodelay(true);
            // Large pieces: with tokio's default 8 KB a large answer takes many more system
            // calls, and the ceiling would be the slowest path of all.
            let _ = tokio::io::copy_bidirectional_with_sizes(
                &mut client,
                &mut upstream,
                RELAY_BUFFER,
                RELAY_BUFFER,
            )
            .await;
        });
    }
}
