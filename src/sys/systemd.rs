//! Service-manager notifications: tells systemd (`Type=notify`) when Concert is ready, when it
//! starts draining, and that it is still alive when a watchdog is configured. Outside systemd
//! (`NOTIFY_SOCKET` unset) every call is a silent no-op.
//!
//! The protocol is one datagram, which systemd's documentation recommends speaking directly
//! rather than through a library. The `sd-notify` crate was weighed against this: it sends to
//! `NOTIFY_SOCKET` as a file path only, so a service manager that names an abstract socket
//! (`@name`) would never hear from Concert, and its watchdog check demands `WATCHDOG_PID`, which
//! the protocol allows to be unset. The hand-written sender below handles both.

use std::io;
use std::time::Duration;

/// Names the socket systemd listens on for notifications.
pub(crate) const NOTIFY_SOCKET_VAR: &str = "NOTIFY_SOCKET";
/// Watchdog period in microseconds, set by systemd when `WatchdogSec=` is configured.
pub(crate) const WATCHDOG_USEC_VAR: &str = "WATCHDOG_USEC";
/// Process the watchdog applies to; absent means "this process".
pub(crate) const WATCHDOG_PID_VAR: &str = "WATCHDOG_PID";

/// Where notifications go: a filesystem path or a Linux abstract-namespace name (`@name`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum NotifyTarget {
    Path(std::path::PathBuf),
    Abstract(Vec<u8>),
}

impl NotifyTarget {
    /// Parses a `NOTIFY_SOCKET` value. Anything but an absolute path or an `@` name is ignored,
    /// as the protocol defines no other forms.
    pub(crate) fn parse(value: &str) -> Option<NotifyTarget> {
        if let Some(name) = value.strip_prefix('@') {
            if name.is_empty() {
                return None;
            }
            return Some(NotifyTarget::Abstract(name.as_bytes().to_vec()));
        }
        if value.starts_with('/') {
            return Some(NotifyTarget::Path(value.into()));
        }
        None
    }

    /// The target named by the process environment, if any.
    pub(crate) fn from_env() -> Option<NotifyTarget> {
        let value = std::env::var(NOTIFY_SOCKET_VAR).ok()?;
        NotifyTarget::parse(&value)
    }

    /// Sends one notification datagram (`READY=1`, `STOPPING=1`, …).
    #[cfg(unix)]
    pub(crate) fn send(&self, state: &str) -> io::Result<()> {
        use std::os::unix::net::UnixDatagram;
        let socket = UnixDatagram::unbound()?;
        // A full receive queue must not stall the runtime; a lost notice is harmless.
        socket.set_nonblocking(true)?;
        let sent = match self {
            NotifyTarget::Path(path) => socket.send_to(state.as_bytes(), path)?,
            NotifyTarget::Abstract(name) => {
                socket.send_to_addr(state.as_bytes(), &abstract_address(name)?)?
            }
        };
        if sent != state.len() {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                "notification was truncated",
            ));
        }
        Ok(())
    }

    #[cfg(not(unix))]
    pub fn send(&self, _state: &str) -> io::Result<()> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "service notifications need Unix sockets",
        ))
    }
}

#[cfg(target_os = "linux")]
fn abstract_address(name: &[u8]) -> io::Result<std::os::unix::net::SocketAddr> {
    use std::os::linux::net::SocketAddrExt;
    std::os::unix::net::SocketAddr::from_abstract_name(name)
}

#[cfg(all(unix, not(target_os = "linux")))]
fn abstract_address(_name: &[u8]) -> io::Result<std::os::unix::net::SocketAddr> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "abstract socket names exist only on Linux",
    ))
}

/// Sends `state` to the service manager named by the environment. Failures are logged, never
/// fatal: a missed notice makes systemd time the unit out, which is the right signal anyway.
fn notify(state: &str) {
    let Some(target) = NotifyTarget::from_env() else {
        return;
    };
    if let Err(error) = target.send(state) {
        tracing::warn!(%error, state, "cannot notify the service manager");
    }
}

/// Tells systemd the listener is bound and requests are being served.
pub(crate) fn notify_ready() {
    notify("READY=1\nSTATUS=serving");
}

/// Tells systemd a graceful stop has begun, so it waits for the drain instead of counting it as
/// a hang.
pub(crate) fn notify_stopping() {
    notify("STOPPING=1\nSTATUS=draining");
}

/// The interval at which to ping the watchdog: half the configured period, so one late tick never
/// trips it. `None` when no watchdog applies to `own_pid`.
pub(crate) fn watchdog_interval(
    usec: Option<&str>,
    pid: Option<&str>,
    own_pid: u32,
) -> Option<Duration> {
    if let Some(pid) = pid
        && pid.trim().parse::<u32>().ok() != Some(own_pid)
    {
        return None;
    }
    let usec: u64 = usec?.trim().parse().ok()?;
    if usec == 0 {
        return None;
    }
    Some(Duration::from_micros(usec / 2).max(Duration::from_millis(1)))
}

/// Starts pinging the watchdog when systemd asked for one. The pings come from the async runtime,
/// so a wedged runtime stops them and systemd restarts the service.
pub(crate) fn spawn_watchdog() -> Option<tokio::task::JoinHandle<()>> {
    let target = NotifyTarget::from_env()?;
    let usec = std::env::var(WATCHDOG_USEC_VAR).ok();
    let pid = std::env::var(WATCHDOG_PID_VAR).ok();
    let every = watchdog_interval(usec.as_deref(), pid.as_deref(), std::process::id())?;
    Some(tokio::spawn(ping_watchdog(target, every)))
}

async fn ping_watchdog(target: NotifyTarget, every: Duration) {
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        if let Err(error) = target.send("WATCHDOG=1") {
            tracing::warn!(%error, "cannot ping the service manager's watchdog");
        }
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::net::UnixDatagram;

    fn receive(socket: &UnixDatagram) -> String {
        socket
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut buffer = [0u8; 256];
        let length = socket.recv(&mut buffer).unwrap();
        String::from_utf8_lossy(&buffer[..length]).into_owned()
    }

    #[test]
    fn parses_paths_and_abstract_names_only() {
        assert_eq!(
            NotifyTarget::parse("/run/systemd/notify"),
            Some(NotifyTarget::Path("/run/systemd/notify".into()))
        );
        assert_eq!(
            NotifyTarget::parse("@/org/freedesktop/systemd1/notify/1"),
            Some(NotifyTarget::Abstract(
                b"/org/freedesktop/systemd1/notify/1".to_vec()
            ))
        );
        for ignored in ["", "@", "relative/socket", "vsock:2:1"] {
            assert_eq!(NotifyTarget::parse(ignored), None, "{ignored:?}");
        }
    }

    #[test]
    fn sends_a_datagram_to_a_path_socket() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let receiver = UnixDatagram::bind(&path).unwrap();
        let target = NotifyTarget::parse(path.to_str().unwrap()).unwrap();
        target.send("READY=1\nSTATUS=serving").unwrap();
        assert_eq!(receive(&receiver), "READY=1\nSTATUS=serving");
        target.send("STOPPING=1").unwrap();
        assert_eq!(receive(&receiver), "STOPPING=1");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn sends_a_datagram_to_an_abstract_socket() {
        let name = format!("concert-notify-test-{}", std::process::id());
        let receiver =
            UnixDatagram::bind_addr(&abstract_address(name.as_bytes()).unwrap()).unwrap();
        let target = NotifyTarget::parse(&format!("@{name}")).unwrap();
        target.send("WATCHDOG=1").unwrap();
        assert_eq!(receive(&receiver), "WATCHDOG=1");
    }

    #[test]
    fn sending_to_a_missing_socket_is_an_error_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let target = NotifyTarget::Path(dir.path().join("nobody-listens"));
        assert!(target.send("READY=1").is_err());
    }

    #[test]
    fn watchdog_pings_at_half_the_period_for_this_process_only() {
        assert_eq!(
            watchdog_interval(Some("30000000"), None, 42),
            Some(Duration::from_secs(15))
        );
        assert_eq!(
            watchdog_interval(Some("30000000"), Some("42"), 42),
            Some(Duration::from_secs(15))
        );
        assert_eq!(watchdog_interval(Some("30000000"), Some("7"), 42), None);
        assert_eq!(watchdog_interval(Some("0"), None, 42), None);
        assert_eq!(watchdog_interval(Some("soon"), None, 42), None);
        assert_eq!(watchdog_interval(None, None, 42), None);
    }

    #[tokio::test(start_paused = true)]
    async fn watchdog_task_keeps_pinging() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("watchdog");
        let receiver = UnixDatagram::bind(&path).unwrap();
        receiver.set_nonblocking(true).unwrap();
        let task = tokio::spawn(ping_watchdog(
            NotifyTarget::Path(path.clone()),
            Duration::from_secs(10),
        ));
        let mut pings = 0;
        let mut buffer = [0u8; 64];
        for _ in 0..3 {
            tokio::time::sleep(Duration::from_secs(10)).await;
            while let Ok(length) = receiver.recv(&mut buffer) {
                assert_eq!(&buffer[..length], b"WATCHDOG=1");
                pings += 1;
            }
        }
        task.abort();
        assert!(pings >= 3, "{pings} pings in 30 s at a 10 s period");
    }
}
