//! A real `redis-server` for the tests: spawned on a free port of 127.0.0.1 when the binary
//! is on PATH, killed on drop. Without it the tests say how to install it and return.

#![allow(dead_code, unreachable_pub)]

use std::io::Write;
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A `redis-server` child process, with no persistence.
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
}

impl RedisServer {
    /// Starts a server on a free port, or explains the skip and returns `None`.
    pub fn start(test: &str) -> Option<RedisServer> {
        if Command::new("redis-server")
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_err()
        {
            // Straight to the process's stderr, past the test harness's capture, so that the
            // skip shows in every run's log.
            let _ = writeln!(
                std::io::stderr(),
                "skipped {test}: redis-server is not on PATH \
                 (install it, e.g. `apt-get install -y redis-server`, to run the Redis tests)"
            );
            return None;
        }
        let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .and_then(|listener| listener.local_addr())
            .expect("a free port")
            .port();
        let mut server = RedisServer { child: None, port };
        server.restart();
        Some(server)
    }

    /// The server to use: `REDIS_URL` when it is set, else one started here (the first of
    /// the pair keeps it alive); `None`, after saying why, when there is neither.
    pub fn from_env_or_start(what: &str) -> Option<(Option<RedisServer>, String)> {
        if let Ok(url) = std::env::var("REDIS_URL") {
            return Some((None, url));
        }
        let server = RedisServer::start(what)?;
        let url = server.url();
        Some((Some(server), url))
    }

    /// The server's URL.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Kills the server (as a crash would: no shutdown, no save).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Freezes the server (SIGSTOP): connections stay open and nothing answers, as with a
    /// server that hangs or a network that drops packets.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// Lets a paused server go on (SIGCONT).
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, signal: &str) {
        let pid = self.child.as_ref().expect("running").id().to_string();
        let status = Command::new("kill")
            .args([signal, &pid])
            .status()
            .expect("kill");
        assert!(status.success(), "kill {signal} {pid}");
    }

    /// Starts the server again on the same port and waits until it accepts connections.
    pub fn restart(&mut self) {
        self.stop();
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server starts");
        self.child = Some(child);
        // A safety bound, not a measurement: a server that has not started in 10 s is broken.
        let give_up = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect((Ipv4Addr::LOCALHOST, self.port)).is_err() {
            assert!(
                Instant::now() < give_up,
                "redis-server did not start on port {}",
                self.port
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// A plain connection for looking at the keys.
    pub async fn connection(&self) -> redis::aio::MultiplexedConnection {
        redis::Client::open(self.url())
            .expect("url")
            .get_multiplexed_async_connection()
            .await
            .expect("connect")
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}
