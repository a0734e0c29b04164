//! What the kernel says about this process: memory, threads, open files and CPU time, read from
//! `/proc/self`. Each figure is `None` where it cannot be read (another system, a hardened
//! `/proc`), so a caller shows "unknown" rather than a wrong zero.

use std::fs;

/// One reading.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct ProcessFigures {
    /// Resident memory now, and the most it has been.
    pub(crate) rss_bytes: Option<u64>,
    pub(crate) rss_peak_bytes: Option<u64>,
    /// Address space reserved (mostly never touched: thread stacks, allocator arenas).
    pub(crate) virtual_bytes: Option<u64>,
    pub(crate) threads: Option<u64>,
    pub(crate) open_fds: Option<u64>,
    /// The soft limit on open files (`None` when unlimited or unknown).
    pub(crate) fd_limit: Option<u64>,
    /// User and system CPU time used since start, in seconds.
    pub(crate) cpu_seconds: Option<f64>,
}

/// Reads the figures now. A few small files; meant for a sampler, not for the request path.
pub(crate) fn read() -> ProcessFigures {
    let status = fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib = |key: &str| status_field(&status, key).map(|kib| kib.saturating_mul(1024));
    ProcessFigures {
        rss_bytes: kib("VmRSS:"),
        rss_peak_bytes: kib("VmHWM:"),
        virtual_bytes: kib("VmSize:"),
        threads: status_field(&status, "Threads:"),
        open_fds: open_fds(),
        fd_limit: fs::read_to_string("/proc/self/limits")
            .ok()
            .and_then(|limits| open_files_limit(&limits)),
        cpu_seconds: fs::read_to_string("/proc/self/stat")
            .ok()
            .and_then(|stat| cpu_ticks(&stat))
            .map(|ticks| ticks as f64 / clock_ticks_per_second() as f64),
    }
}

/// The number after `key` on its line of `/proc/self/status` (`VmRSS:   1234 kB`).
fn status_field(status: &str, key: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|line| line.strip_prefix(key))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|number| number.parse().ok())
}

/// utime + stime of `/proc/self/stat`, in clock ticks. They are the 14th and 15th fields; the
/// 2nd, the command name in parentheses, may itself hold spaces and parentheses, so counting
/// starts after its last `)`.
fn cpu_ticks(stat: &str) -> Option<u64> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    // The fields after the name start with the 3rd (state): utime is 11 further on.
    let mut fields = after_name.split_whitespace().skip(11);
    let user: u64 = fields.next()?.parse().ok()?;
    let system: u64 = fields.next()?.parse().ok()?;
    Some(user.saturating_add(system))
}

/// The soft limit of the `Max open files` line of `/proc/self/limits`.
fn open_files_limit(limits: &str) -> Option<u64> {
    limits
        .lines()
        .find_map(|line| line.strip_prefix("Max open files"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|soft| soft.parse().ok())
}

fn open_fds() -> Option<u64> {
    // The directory's own handle is one of the entries while it is being read.
    let entries = fs::read_dir("/proc/self/fd").ok()?.count() as u64;
    Some(entries.saturating_sub(1))
}

#[cfg(target_os = "linux")]
fn clock_ticks_per_second() -> u64 {
    rustix::param::clock_ticks_per_second().max(1)
}

/// What Linux reports everywhere it runs this; only a guess elsewhere.
#[cfg(not(target_os = "linux"))]
fn clock_ticks_per_second() -> u64 {
    100
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_is_found_after_a_name_with_spaces_and_parentheses() {
        let stat = "4242 (con cert) (x)) S 1 4242 4242 0 -1 4194560 1234 0 0 0 250 37 0 0 20 0 9 0 1000 123456 789 18446744073709551615";
        assert_eq!(cpu_ticks(stat), Some(287));
        assert_eq!(cpu_ticks("4242 (concert) S 1"), None);
        assert_eq!(cpu_ticks("no name here"), None);
    }

    #[test]
    fn status_and_limit_lines_are_read_by_their_key() {
        let status = "Name:\tconcert\nVmHWM:\t   20480 kB\nVmRSS:\t   10240 kB\nThreads:\t7\n";
        assert_eq!(status_field(status, "VmRSS:"), Some(10240));
        assert_eq!(status_field(status, "Threads:"), Some(7));
        assert_eq!(status_field(status, "VmSize:"), None);
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \nMax open files            1024                 524288               files     \n";
        assert_eq!(open_files_limit(limits), Some(1024));
        assert_eq!(
            open_files_limit(
                "Max open files            unlimited            unlimited            files"
            ),
            None
        );
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_has_memory_threads_files_and_cpu_time() {
        // Burn a little CPU so the count cannot be zero by rounding.
        let mut sum = 0u64;
        for i in 0..5_000_000u64 {
            sum = sum.wrapping_add(i.wrapping_mul(i));
        }
        std::hint::black_box(sum);
        let figures = read();
        assert!(figures.rss_bytes.is_some_and(|rss| rss > 1024 * 1024));
        assert!(figures.rss_peak_bytes >= figures.rss_bytes);
        assert!(figures.virtual_bytes >= figures.rss_bytes);
        assert!(figures.threads.is_some_and(|threads| threads >= 1));
        assert!(figures.open_fds.is_some_and(|fds| fds >= 3));
        assert!(figures.cpu_seconds.is_some());
    }
}
