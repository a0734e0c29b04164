//! A real `redis-server` on a loopback port, owned by one test: started with persistence off in
//! a temp directory, stopped, killed and started again on the same port, as an operator's Redis
//! might be.
#![allow(dead_code)]

use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One redis-server process; it is killed when this is dropped.
pub struct RedisServer {
    pub port: u16,
    password: Option<String>,
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl RedisServer {
    /// Starts a server without a password on a free loopback port.
    pub fn start() -> RedisServer {
        RedisServer::start_with(None)
    }

    /// Starts a server that requires `password` (`requirepass`).
    pub fn start_with_password(password: &str) -> RedisServer {
        RedisServer::start_with(Some(password.to_owned()))
    }

    fn start_with(password: Option<String>) -> RedisServer {
        let port = free_port();
        let mut server = RedisServer {
            port,
            password,
            dir: tempfile::tempdir().expect("temp dir for redis"),
            child: None,
        };
        server.resume();
        server
    }

    /// `redis://127.0.0.1:<port>/0`, without the password.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// Starts the server again on its port after [`RedisServer::stop`] or
    /// [`RedisServer::kill`]; it comes back empty, as a Redis without persistence does.
    pub fn resume(&mut self) {
        assert!(self.child.is_none(), "redis-server is already running");
        let mut command = Command::new(redis_binary());
        command
            .args(["--bind", "127.0.0.1", "--port"])
            .arg(self.port.to_string())
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .args(["--protected-mode", "no", "--loglevel", "warning"])
            .arg("--dir")
            .arg(self.dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if let Some(password) = &self.password {
            command.args(["--requirepass", password]);
        }
        let child = command
            .spawn()
            .expect("redis-server runs (apt-get install redis-server)");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("redis-server did not listen on {} within 10 s", self.port);
    }

    /// Stops the server (SIGKILL, so nothing is flushed and clients see the port close).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Same as [`RedisServer::kill`]: the server has no persistence to flush.
    pub fn stop(&mut self) {
        self.kill();
    }

    /// A client for assertions, with the password when there is one.
    pub fn client(&self) -> redis::Client {
        let url = match &self.password {
            Some(password) => format!("redis://:{password}@127.0.0.1:{}/0", self.port),
            None => self.url(),
        };
        redis::Client::open(url).expect("redis client")
    }

    /// A blocking connection for assertions.
    pub fn connection(&self) -> redis::Connection {
        self.client()
            .get_connection_with_timeout(Duration::from_secs(2))
            .expect("connects to the test redis-server")
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().to_path_buf()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

fn redis_binary() -> PathBuf {
    for candidate in ["/usr/bin/redis-server", "/usr/local/bin/redis-server"] {
        let path = PathBuf::from(candidate);
        if path.exists() {
            return path;
        }
    }
    PathBuf::from("redis-server")
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.local_addr().expect("bound address").port()
}
