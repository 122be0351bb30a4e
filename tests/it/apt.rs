//! scripts/apt.sh, the apt helper every script installs packages with: while another process holds one of the
//! package system's locks (as an upgrade at boot does), its calls wait instead of failing at once with "Could not
//! get lock", and past HOSTFIRST_APT_LOCK_TIMEOUT they fail saying which lock. The locks are held here the way apt
//! and dpkg take them (fcntl record locks, Python's `fcntl.lockf`), and the helper runs `apt-get install
//! --no-upgrade dpkg` (already installed: nothing changes, but apt takes its locks).
//!
//! Needs root, apt-get and python3 (as scripts/test.sh runs); elsewhere each test says SKIPPED and returns.

use crate::common::{root, scratch};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::time::Duration;

/// dpkg's frontend lock (waited for by apt's own DPkg::Lock::Timeout) and the download cache's lock (which that
/// option does not cover: the helper's loop waits for it, as for `apt-get update`'s lists lock).
const FRONTEND: &str = "/var/lib/dpkg/lock-frontend";
const ARCHIVES: &str = "/var/cache/apt/archives/lock";

/// The tests take the same system locks: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn usable(test: &str) -> bool {
    let root_user = Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout == b"0\n");
    let apt = Command::new("apt-get").arg("--version").output().is_ok_and(|o| o.status.success());
    let ok = root_user && apt && std::path::Path::new(FRONTEND).exists();
    if !ok {
        use std::io::Write;
        let _ = writeln!(std::io::stderr(), "SKIPPED ({test}): needs root and apt-get with dpkg (Debian, Ubuntu)");
    }
    ok
}

/// A process holding `lock` until it is dropped (its stdin closes).
struct Holder {
    child: Child,
    _stdin: ChildStdin,
}

fn hold(lock: &str) -> Holder {
    let mut child = Command::new("python3")
        .args([
            "-c",
            "import fcntl, os, sys\n\
             fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o640)\n\
             fcntl.lockf(fd, fcntl.LOCK_EX)\n\
             print('held', flush=True)\n\
             sys.stdin.read()\n",
            lock,
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run python3");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert_eq!(line, "held\n", "the lock holder of {lock} did not take it");
    let stdin = child.stdin.take().unwrap();
    Holder { child, _stdin: stdin }
}

impl Holder {
    fn release(self) {
        let Holder { mut child, _stdin } = self;
        drop(_stdin);
        child.wait().unwrap();
    }
}

/// Starts the helper (`apt_get install -y -qq --no-upgrade dpkg`) with the given limit; its stderr goes to a file.
fn helper(limit: &str, name: &str) -> (Child, PathBuf) {
    let err = scratch("apt").join(format!("{name}.err"));
    let child = Command::new("bash")
        .args(["-c", ". scripts/apt.sh && apt_get install -y -qq --no-upgrade dpkg"])
        .current_dir(root())
        .env("HOSTFIRST_APT_LOCK_TIMEOUT", limit)
        .env("APT_WHO", "apt-test")
        .env("DEBIAN_FRONTEND", "noninteractive")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .expect("run bash");
    (child, err)
}

fn finish(mut child: Child, err: &PathBuf) -> (ExitStatus, String) {
    let status = child.wait().unwrap();
    (status, std::fs::read_to_string(err).unwrap())
}

/// With a lock held when it starts, the helper is still waiting a while later, and succeeds once the lock is
/// released.
#[test]
fn waits_for_a_held_lock_then_succeeds() {
    if !usable("apt::waits_for_a_held_lock_then_succeeds") {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for (lock, name) in [(FRONTEND, "frontend"), (ARCHIVES, "archives")] {
        let holder = hold(lock);
        let (mut child, err) = helper("900", &format!("wait-{name}"));
        // It cannot end while the lock is held (apt-get alone fails within this time).
        std::thread::sleep(Duration::from_secs(3));
        assert!(
            child.try_wait().unwrap().is_none(),
            "the helper ended while {lock} was held:\n{}",
            std::fs::read_to_string(&err).unwrap()
        );
        holder.release();
        let (status, text) = finish(child, &err);
        assert!(status.success(), "after {lock} was released the helper failed ({status}):\n{text}");
    }
}

/// Past its limit the helper fails with status 1, naming the lock (apt's words differ: "Could not get lock
/// PATH", "Unable to acquire the dpkg frontend lock (PATH)") and the setting that waits longer.
#[test]
fn gives_up_after_the_limit_saying_why() {
    if !usable("apt::gives_up_after_the_limit_saying_why") {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for (lock, name) in [(FRONTEND, "frontend"), (ARCHIVES, "archives")] {
        let holder = hold(lock);
        let (child, err) = helper("2", &format!("give-up-{name}"));
        let (status, text) = finish(child, &err);
        holder.release();
        assert_eq!(status.code(), Some(1), "{lock}:\n{text}");
        for needle in [
            "apt-test: gave up on 'apt-get install -y -qq --no-upgrade dpkg' after waiting 2 s",
            lock,
            "HOSTFIRST_APT_LOCK_TIMEOUT",
        ] {
            assert!(text.contains(needle), "{lock}: no {needle:?} in:\n{text}");
        }
    }
}

/// Every script that installs packages does it through scripts/apt.sh: no other file of scripts/ or benches/
/// runs apt-get itself (messages that tell a user to run it are fine).
#[test]
fn every_apt_call_goes_through_the_helper() {
    let mut files = Vec::new();
    for dir in ["scripts", "benches", "benches/gpu", "fuzz", ".ci"] {
        let Ok(entries) = std::fs::read_dir(root().join(dir)) else { continue };
        for e in entries {
            let p = e.unwrap().path();
            if p.is_file() && p.file_name().unwrap() != "apt.sh" {
                files.push(p);
            }
        }
    }
    assert!(files.len() > 10, "{files:?}");
    let mut direct = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        let python = f.extension().is_some_and(|x| x == "py");
        for (i, line) in text.lines().enumerate() {
            let code = line.trim_start();
            if code.starts_with('#') || !code.contains("apt-get") {
                continue;
            }
            // A shell message naming the command (`die "... apt-get install X"`) runs nothing.
            let message = !python && ["die ", "echo ", "win_die "].iter().any(|m| code.contains(m));
            if python || !message {
                direct.push(format!("{}:{}: {line}", f.display(), i + 1));
            }
        }
    }
    assert!(direct.is_empty(), "apt-get called outside scripts/apt.sh:\n{}", direct.join("\n"));
}
