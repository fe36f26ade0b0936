//! The official Python implementations of the protocols the runtime speaks (the MCP Python SDK,
//! `a2a-sdk`, OpenAI's client), run from the project's virtualenv for interop tests: the scripts
//! of `tests/interop/`, as servers on a free loopback port or as one-shot clients.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

/// How long a script may take to start serving (imports included), or to run to its end.
const START_TIMEOUT: Duration = Duration::from_secs(60);
const RUN_TIMEOUT: Duration = Duration::from_secs(120);

/// The virtualenv's interpreter, where `infra/scripts/ensure-venv local` installs the pinned
/// packages of `infra/python/requirements-local.txt`.
pub fn python() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../.venv/bin/python")
}

/// A script of `tests/interop/`.
pub fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("interop").join(name)
}

fn command(name: &str, args: &[&str]) -> Command {
    let mut command = Command::new(python());
    // -B: no `__pycache__` left in the source tree.
    command.arg("-B").arg(script(name)).args(args).kill_on_drop(true);
    command
}

fn cannot_run(err: std::io::Error) -> ! {
    panic!("{} cannot run ({err}): run infra/scripts/ensure-venv local", python().display())
}

/// A Python server started from a script of `tests/interop/`; it is killed when dropped.
pub struct PythonServer {
    pub port: u16,
    /// Where its stderr goes (removed on drop unless the test failed).
    log: PathBuf,
    _child: Child,
    // Kept open: the server's stdout stays writable.
    _stdout: Lines<BufReader<ChildStdout>>,
}

impl PythonServer {
    /// Runs `name` with `args` and waits until it accepts connections. The script prints its
    /// port on its first stdout line once it listens (`tests/interop/serve.py`).
    pub async fn start(name: &str, args: &[&str]) -> Self {
        static STARTED: AtomicU64 = AtomicU64::new(0);
        let log = std::env::temp_dir().join(format!(
            "interop-{}-{}-{}.log",
            name.trim_end_matches(".py"),
            std::process::id(),
            STARTED.fetch_add(1, Ordering::Relaxed)
        ));
        let stderr = std::fs::File::create(&log).expect("a log file");
        let mut child = command(name, args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|err| cannot_run(err));
        let mut stdout = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
        let failed = |what: &str| -> ! {
            panic!("{name} {what}; its stderr:\n{}", std::fs::read_to_string(&log).unwrap_or_default())
        };
        let port = match tokio::time::timeout(START_TIMEOUT, stdout.next_line()).await {
            Ok(Ok(Some(line))) => line.trim().parse::<u16>().unwrap_or_else(|_| failed("printed no port")),
            Ok(_) => failed("exited before it listened"),
            Err(_) => failed("did not listen within 60 s"),
        };
        let server = Self { port, log, _child: child, _stdout: stdout };
        server.wait_until_accepting().await;
        server
    }

    /// A bounded poll: the socket listens before the port is printed, so the first try
    /// normally connects.
    async fn wait_until_accepting(&self) {
        let deadline = tokio::time::Instant::now() + START_TIMEOUT;
        while tokio::net::TcpStream::connect(("127.0.0.1", self.port)).await.is_err() {
            assert!(tokio::time::Instant::now() < deadline, "port {} never accepted; {}", self.port, self.log());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// `http://127.0.0.1:{port}{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// What the server wrote to stderr so far, for assertion messages.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for PythonServer {
    fn drop(&mut self) {
        // The child is killed by `kill_on_drop`; a failed test keeps the log to read.
        if !std::thread::panicking() {
            let _ = std::fs::remove_file(&self.log);
        }
    }
}

/// Runs the script `name` with `args` and `stdin` to its end; returns its stdout. Panics with
/// its stderr when it fails.
pub async fn run_script(name: &str, args: &[&str], stdin: &str) -> String {
    let mut child = command(name, args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|err| cannot_run(err));
    let mut input = child.stdin.take().expect("piped stdin");
    input.write_all(stdin.as_bytes()).await.expect("stdin written");
    drop(input);
    let output = tokio::time::timeout(RUN_TIMEOUT, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("{name} did not finish within {} s", RUN_TIMEOUT.as_secs()))
        .expect("the script's output");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{name} failed: {}\n{stdout}{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}
