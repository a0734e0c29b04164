//! Deployment files: the installer (shellcheck, dry run, defaults, helpers), the SELinux policy
//! (it compiles), the systemd units (systemd-analyze verify), and the binary's side of the unit
//! (readiness, watchdog and stopping notifications; SIGHUP does not end it).
//! Checks that need a tool this machine lacks say so and pass; `.ci/run` installs the tools.

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const BIN: &str = env!("CARGO_BIN_EXE_concert");

/// A deployment file, by its path from the repository root.
fn deploy(file: &str) -> PathBuf {
    Path::new(ROOT).join(file)
}

fn has_tool(tool: &str) -> bool {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .map(|status| status.success())
        .unwrap_or(false);
    // CI installs every tool (.ci/run); there a missing one is a failure, not a quiet skip.
    if !found && std::env::var_os("CI").is_some() {
        panic!("{tool} is not installed, but CI must run this check (see .ci/run)");
    }
    if !found {
        eprintln!("skipped: {tool} is not installed");
    }
    found
}

fn assert_success(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs a bash snippet with the installer's functions loaded (its `main` does not run when sourced).
fn with_installer(script: &str) -> String {
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "set -euo pipefail; source {}; {script}",
            deploy("installer.sh").display()
        ))
        .output()
        .unwrap();
    assert_success(&out, script);
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn shell_scripts_are_shellcheck_clean() {
    if !has_tool("shellcheck") {
        return;
    }
    let out = Command::new("shellcheck")
        .current_dir(ROOT)
        .arg("-x")
        .args([
            "installer.sh",
            "ipasn/concert-ipasn-update",
            "scripts/build.sh",
            "scripts/check-binary.sh",
            "scripts/pgo.sh",
            "tests/installer-harness.sh",
            ".ci/run",
        ])
        .output()
        .unwrap();
    assert_success(&out, "shellcheck");
}

#[test]
fn installer_dry_run_prints_the_rhel_steps_and_changes_nothing() {
    let etc_existed = Path::new("/etc/concert").exists();
    let out = Command::new("bash")
        .arg(deploy("installer.sh"))
        .arg("--dry-run")
        .output()
        .unwrap();
    assert_success(&out, "installer.sh --dry-run");
    let text = String::from_utf8_lossy(&out.stdout);
    for step in [
        "dnf install",
        "useradd --system",
        "/usr/local/bin/concert",
        "/etc/concert/concert.env",
        "/etc/concert/secrets.env (0600 root:root)",
        "semodule -i concert.pp",
        "semanage port -a -t concert_port_t -p tcp 8080",
        "semanage port -a -t concert_origin_port_t -p tcp 3000",
        "restorecon -R",
        "systemctl enable concert.service",
        "systemctl enable --now concert-ipasn-update.timer",
        "systemctl start concert.service",
    ] {
        assert!(text.contains(step), "dry run lacks {step:?}:\n{text}");
    }
    // No secret-looking value reaches the terminal.
    assert!(
        !text
            .split(|c: char| !c.is_ascii_hexdigit())
            .any(|word| word.len() >= 32),
        "{text}"
    );
    assert_eq!(Path::new("/etc/concert").exists(), etc_existed);

    let out = Command::new("bash")
        .arg(deploy("installer.sh"))
        .args(["--dry-run", "--uninstall"])
        .output()
        .unwrap();
    assert_success(&out, "installer.sh --dry-run --uninstall");
}

#[test]
fn installer_second_run_changes_nothing_and_keeps_operator_edits() {
    // The harness runs the installer's real steps in a temp root with the RHEL tools faked.
    let out = Command::new("bash")
        .arg(Path::new(ROOT).join("tests/installer-harness.sh"))
        .arg(BIN)
        .output()
        .unwrap();
    assert_success(&out, "tests/installer-harness.sh");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.matches("ok: ").count(), 5, "{text}");
}

#[test]
fn installer_refuses_unknown_options() {
    let out = Command::new("bash")
        .arg(deploy("installer.sh"))
        .args(["--dry-run", "--frobnicate"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--frobnicate"));
}

#[test]
fn installer_defaults_match_the_binary() {
    let installer = std::fs::read_to_string(deploy("installer.sh")).unwrap();
    let default_of = |name: &str| -> String {
        installer
            .lines()
            .find_map(|line| line.strip_prefix(&format!("{name}=")))
            .unwrap_or_else(|| panic!("installer.sh has no {name}"))
            .trim_matches('"')
            .to_string()
    };
    let binary = |key: &str| concert::config::setting(key).unwrap().1.default;
    assert_eq!(default_of("DEFAULT_LISTEN"), binary("listen"));
    assert_eq!(default_of("DEFAULT_UPSTREAM"), binary("upstream"));
    assert_eq!(default_of("DEFAULT_CAP"), binary("cap"));
    assert_eq!(default_of("DEFAULT_PORTAL_LISTEN"), binary("portal_listen"));
    assert_eq!(
        default_of("DEFAULT_DATA_DIR"),
        concert::config::DEFAULT_DATA_DIR
    );
}

#[test]
fn installer_reads_ports_from_addresses_and_urls() {
    let out = with_installer(
        "for a in :8080 127.0.0.1:8081 '[::1]:9000'; do listen_port \"$a\"; echo; done; \
         for u in http://127.0.0.1:3000 https://origin.example http://origin.example/x \
                  'http://[::1]:8443/p?q' http://user@host:81; do url_port \"$u\"; echo; done",
    );
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        ["8080", "8081", "9000", "3000", "443", "80", "8443", "81"]
    );
}

#[test]
fn installer_finds_the_most_specific_selinux_port_type() {
    let fake = "semanage() { printf '%s\\n' \
        'SELinux Port Type              Proto    Port Number' \
        'http_cache_port_t              tcp      8080, 8118, 8123, 10001-10010' \
        'http_cache_port_t              udp      3130' \
        'ephemeral_port_t               tcp      32768-60999' \
        'concert_port_t                 tcp      32800' \
        'ntop_port_t                    tcp      3000-3001'; }; ";
    let out = with_installer(&format!(
        "{fake} for p in 8080 10005 32800 40000 3000 3130 9999; do echo \"$p=$(port_type $p)\"; done"
    ));
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [
            "8080=http_cache_port_t exact",
            "10005=http_cache_port_t range",
            "32800=concert_port_t exact",
            "40000=ephemeral_port_t range",
            "3000=ntop_port_t range",
            "3130=",
            "9999=",
        ]
    );
}

#[test]
fn installer_env_file_keeps_the_binary_defaults_unless_given() {
    let out = with_installer("render_env_file");
    assert!(out.contains("#CONCERT_CAPACITY=434\n"), "{out}");
    assert!(out.contains("#CONCERT_UPSTREAM=http://127.0.0.1:3000\n"));
    let out = with_installer("OPT_UPSTREAM=http://10.0.0.5:8000 OPT_CAP=40; render_env_file");
    assert!(
        out.contains("\nCONCERT_UPSTREAM=http://10.0.0.5:8000\n"),
        "{out}"
    );
    assert!(out.contains("\nCONCERT_CAPACITY=40\n"));
}

#[test]
fn installer_generates_long_distinct_secrets() {
    let out = with_installer("render_secrets_file");
    let value = |name: &str| {
        out.lines()
            .find_map(|line| line.strip_prefix(&format!("{name}=")))
            .unwrap()
            .to_string()
    };
    let admit = value("CONCERT_ADMIT_SECRET");
    let token = value("CONCERT_ADMIN_TOKEN");
    let pass = value("CONCERT_PORTAL_PASS");
    assert_eq!(admit.len(), 64);
    assert_eq!(token.len(), 64);
    assert_eq!(pass.len(), 32);
    assert!(admit.chars().all(|c| c.is_ascii_hexdigit()));
    assert_ne!(admit, token);
    assert_ne!(
        with_installer("random_hex 16"),
        with_installer("random_hex 16")
    );
}

#[test]
fn selinux_module_compiles() {
    let makefile = Path::new("/usr/share/selinux/devel/Makefile");
    assert!(
        makefile.exists() || std::env::var_os("CI").is_none(),
        "selinux-policy-dev is not installed, but CI must compile the module (see .ci/run)"
    );
    if !makefile.exists() {
        eprintln!(
            "skipped: {} is missing (selinux-policy-dev)",
            makefile.display()
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    for file in ["concert.te", "concert.fc", "concert.if"] {
        std::fs::copy(deploy("selinux").join(file), dir.path().join(file)).unwrap();
    }
    let out = Command::new("make")
        .current_dir(dir.path())
        .args(["-f", "/usr/share/selinux/devel/Makefile", "concert.pp"])
        .output()
        .unwrap();
    assert_success(&out, "building concert.pp");
    assert!(dir.path().join("concert.pp").exists());
}

#[test]
fn ports_module_compiles() {
    if !has_tool("checkmodule") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("concert_ports.te");
    with_installer(&format!(
        "write_ports_module {} 'http_cache_port_t' 'ntop_port_t http_port_t'",
        source.display()
    ));
    let text = std::fs::read_to_string(&source).unwrap();
    assert!(text.contains("allow concert_t http_cache_port_t:tcp_socket name_bind;"));
    assert!(text.contains("allow concert_t ntop_port_t:tcp_socket name_connect;"));
    assert!(!text.contains("http_cache_port_t:tcp_socket name_connect"));
    let out = Command::new("checkmodule")
        .args(["-M", "-m", "-o"])
        .arg(dir.path().join("concert_ports.mod"))
        .arg(&source)
        .output()
        .unwrap();
    assert_success(&out, "checkmodule");
}

#[test]
fn systemd_units_verify() {
    if !has_tool("systemd-analyze") {
        return;
    }
    // verify insists that ExecStart exists, so point the copies at this build.
    let dir = tempfile::tempdir().unwrap();
    let units = [
        "concert.service",
        "ipasn/concert-ipasn-update.service",
        "ipasn/concert-ipasn-update.timer",
    ];
    // systemd names a unit by its file name, so the copies sit side by side.
    let copy = |unit: &str| dir.path().join(Path::new(unit).file_name().unwrap());
    for unit in units {
        let text = std::fs::read_to_string(deploy(unit))
            .unwrap()
            .replace("/usr/local/bin/concert", BIN)
            .replace(
                "/usr/local/libexec/concert-ipasn-update",
                deploy("ipasn/concert-ipasn-update").to_str().unwrap(),
            );
        std::fs::write(copy(unit), text).unwrap();
    }
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg("--man=no")
        .args(units.map(copy))
        .output()
        .unwrap();
    assert_success(&out, "systemd-analyze verify");
    let unit = std::fs::read_to_string(deploy("concert.service")).unwrap();
    for line in [
        "Type=notify",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "StateDirectory=concert",
        "EnvironmentFile=/etc/concert/concert.env",
        "EnvironmentFile=/etc/concert/secrets.env",
        "Restart=on-failure",
        "ExecReload=/bin/kill -HUP $MAINPID",
    ] {
        assert!(unit.lines().any(|l| l == line), "unit lacks {line}");
    }
}

/// A running `concert` whose notifications arrive on a datagram socket.
struct Notified {
    child: std::process::Child,
    socket: UnixDatagram,
    _dir: tempfile::TempDir,
}

impl Notified {
    fn start(watchdog_usec: Option<&str>) -> Notified {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let socket = UnixDatagram::bind(&path).unwrap();
        socket
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut command = Command::new(BIN);
        command
            .args(["-listen", "127.0.0.1:0", "-data-dir", ""])
            .env("NOTIFY_SOCKET", &path)
            .env_remove("WATCHDOG_PID")
            .env_remove("CONCERT_CAPACITY")
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        match watchdog_usec {
            Some(usec) => command.env("WATCHDOG_USEC", usec),
            None => command.env_remove("WATCHDOG_USEC"),
        };
        let child = command.spawn().unwrap();
        Notified {
            child,
            socket,
            _dir: dir,
        }
    }

    fn next(&self) -> String {
        let mut buffer = [0u8; 256];
        let length = self.socket.recv(&mut buffer).expect("no notification");
        String::from_utf8_lossy(&buffer[..length]).into_owned()
    }

    fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .args([&format!("-{name}"), &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    fn wait_exit(&mut self) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for Notified {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn binary_tells_systemd_when_ready_and_when_stopping() {
    let mut concert = Notified::start(None);
    assert!(concert.next().starts_with("READY=1"));
    concert.signal("TERM");
    assert!(concert.next().starts_with("STOPPING=1"));
    let status = concert.wait_exit().expect("concert did not stop");
    assert!(status.success(), "{status}");
}

#[test]
fn binary_pings_the_watchdog_and_survives_sighup() {
    // 200 ms period: pings every 100 ms.
    let mut concert = Notified::start(Some("200000"));
    let mut seen = Vec::new();
    while seen.iter().filter(|m: &&String| *m == "WATCHDOG=1").count() < 2 {
        seen.push(concert.next());
        assert!(seen.len() < 50, "{seen:?}");
    }
    assert!(seen.iter().any(|m| m.starts_with("READY=1")), "{seen:?}");
    concert.signal("HUP");
    // Still alive and still pinging after the reload request.
    for _ in 0..3 {
        assert_eq!(concert.next(), "WATCHDOG=1");
    }
    assert!(concert.child.try_wait().unwrap().is_none());
    concert.signal("TERM");
    assert!(concert.wait_exit().is_some_and(|status| status.success()));
}

#[test]
fn installer_labels_the_plain_http_port_and_lets_https_out_for_acme() {
    let dir = tempfile::tempdir().unwrap();
    let env = dir.path().join("concert.env");
    std::fs::write(
        &env,
        "CONCERT_LISTEN=:443\nCONCERT_HTTP_LISTEN=:80\nCONCERT_TLS_DOMAINS=example.com\n",
    )
    .unwrap();
    let out = with_installer(&format!(
        "ENV_FILE={}; SECRETS_FILE=/nonexistent; listen_ports; echo --; connect_ports; \
         has_low_port && echo low",
        env.display()
    ));
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        ["443", "80", "8081", "--", "3000", "443", "low"],
        "{out}"
    );
}
