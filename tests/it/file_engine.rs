//! The read engine of each file (issue 45, part 3), on a real FUSE mount: a folder under target/test-tmp
//! mounted with bindfs (Debian's package; needs root and /dev/fuse). The file through the mount is reported as
//! fuse and read with owned reads (no mapping handed out), unlike the same file on the local disk; loads are
//! byte-exact; a file truncated under a reader gives TRUNCATED, never SIGBUS.
//!
//! Where the process is not root, or there is no /dev/fuse or no bindfs, each test says loudly that it skipped;
//! under CI=true as root a mount that fails fails the test.

use crate::common::*;
use hostfirst::place::export::{export_view, CopyPolicy, Form};
use hostfirst::place::{load_with, put, LoadOptions, Placed, Plan, PutOptions, Rules, Target};
use hostfirst::{Device, Status, TensorFile};
use std::path::{Path, PathBuf};
use std::process::Command;

/// A bindfs mount, unmounted (and its folders removed) when dropped, whatever the test did.
struct Mount {
    base: PathBuf,
    mnt: PathBuf,
}

impl Mount {
    fn source(&self) -> PathBuf {
        self.base.join("src")
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let ok = Command::new("fusermount").arg("-u").arg(&self.mnt).status().is_ok_and(|s| s.success())
            || Command::new("umount").arg(&self.mnt).status().is_ok_and(|s| s.success());
        if !ok {
            // Lazy unmount as a last resort, so no mount outlives the test run.
            let _ = Command::new("umount").arg("-l").arg(&self.mnt).status();
        }
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// Mounts a fresh folder with bindfs, or says why it cannot (`None`, after printing that the test skipped;
/// under CI=true as root, a failure to mount panics instead).
fn bindfs(test: &str) -> Option<Mount> {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let why = if !root {
        Some("not root".to_string())
    } else if !Path::new("/dev/fuse").exists() {
        Some("no /dev/fuse".to_string())
    } else if Command::new("bindfs").arg("--version").output().is_err() {
        Some("bindfs is not installed (scripts/test.sh installs it)".to_string())
    } else {
        None
    };
    if let Some(why) = why {
        assert!(!(ci() && root), "{test}: CI=true as root, but the FUSE test cannot run: {why}");
        eprintln!("SKIPPED {test}: no FUSE mount here ({why})");
        return None;
    }
    let base = root_dir().join("target/test-tmp").join(format!("fuse-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let (src, mnt) = (base.join("src"), base.join("mnt"));
    std::fs::create_dir_all(&src).unwrap();
    std::fs::create_dir_all(&mnt).unwrap();
    let out = Command::new("bindfs").arg(&src).arg(&mnt).output().expect("run bindfs");
    if !out.status.success() {
        let msg = format!("bindfs {} {}: {}", src.display(), mnt.display(), String::from_utf8_lossy(&out.stderr));
        let _ = std::fs::remove_dir_all(&base);
        assert!(!ci(), "{test}: CI=true as root, but {msg}");
        eprintln!("SKIPPED {test}: {msg}");
        return None;
    }
    Some(Mount { base, mnt })
}

fn root_dir() -> PathBuf {
    root()
}

/// A safetensors image of (name, F32 [n], bytes) tensors; data starts off any page boundary.
fn image(tensors: &[(&str, Vec<u8>)]) -> Vec<u8> {
    let mut header = String::from("{");
    let mut off = 0;
    for (i, (n, b)) in tensors.iter().enumerate() {
        header.push_str(&format!(
            r#"{}"{n}":{{"dtype":"F32","shape":[{}],"data_offsets":[{off},{}]}}"#,
            if i > 0 { "," } else { "" },
            b.len() / 4,
            off + b.len()
        ));
        off += b.len();
    }
    header.push('}');
    header.push_str(&" ".repeat((8 - header.len() % 8) % 8));
    let mut img = (header.len() as u64).to_le_bytes().to_vec();
    img.extend_from_slice(header.as_bytes());
    for (_, b) in tensors {
        img.extend_from_slice(b);
    }
    img
}

fn tensors() -> Vec<(&'static str, Vec<u8>)> {
    let big: Vec<u8> = (0..(3 << 20) as u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    let small: Vec<u8> = (0..4096u32).map(|i| (i % 251) as u8).collect();
    vec![("small", small), ("big", big)]
}

/// The same file on the local disk and through the FUSE mount: the reports name each file system and differ;
/// the FUSE file is read with owned reads (no view hands out the mapping) and every load is byte-exact.
#[test]
fn a_file_on_fuse_is_reported_as_fuse_and_read_with_owned_reads() {
    let Some(m) = bindfs("report") else { return };
    let ts = tensors();
    std::fs::write(m.source().join("m.safetensors"), image(&ts)).unwrap();
    let local = TensorFile::open(m.source().join("m.safetensors")).unwrap();
    let fuse = TensorFile::open(m.mnt.join("m.safetensors")).unwrap();
    let (lr, fr) = (local.read_engine(), fuse.read_engine());
    // "fuse (f_type ...", or "fuse (fuse.bindfs, f_type ..." where the mount names its subtype.
    assert!(fr.starts_with("fuse (") && fr.contains("f_type 0x65735546, user-space): owned reads"), "{fr}");
    assert!(fr.contains("SIGBUS") && fr.contains("HOSTFIRST_MAP=always") && fr.contains("O_DIRECT: "), "{fr}");
    assert!(!lr.starts_with("fuse") && lr.contains(": mapped ("), "{lr}");
    assert_ne!(lr, fr);
    assert!(local.maps() && !fuse.maps());

    for (name, bytes) in &ts {
        let v = fuse.view(name).unwrap();
        assert!(!v.maps(), "{name}");
        assert!(!v.prefault().unwrap(), "{name}: owned reads populate no mapping");
        let mut got = vec![0u8; bytes.len()];
        v.read_at(0, &mut got).unwrap();
        assert!(got == *bytes, "{name}: pread through FUSE");
        // A DLPack export copies instead of handing out the mapping; copy=never is refused, naming why.
        let e = export_view(&v, Form::Versioned, CopyPolicy::IfNeeded, None).unwrap();
        assert!(e.copied, "{name}");
        // SAFETY: the export keeps its bytes alive at e.data.
        assert!(unsafe { std::slice::from_raw_parts(e.data as *const u8, bytes.len()) } == &bytes[..]);
        let never = export_view(&v, Form::Versioned, CopyPolicy::Never, None).err().expect("copy=never is refused");
        assert_eq!(never.status(), Status::Unsupported);
        assert!(never.message().contains("owned reads"), "{}", never.message());
        // Copy-on-write puts copy.
        let b =
            put(&v, Target::Device(Device::CPU), PutOptions { copy_on_write: true, ..PutOptions::default() }).unwrap();
        assert!(!b.is_file_backed() && b.host_bytes().unwrap() == &bytes[..], "{name}");
    }
    // A load: host placement becomes a cpu copy, copy-on-write copies, bytes exact.
    let plan = Plan::make(&fuse, &Rules::parse(["small=host", "*=cpu"]).unwrap()).unwrap();
    for cow in [false, true] {
        let loaded =
            load_with(&fuse, &plan, LoadOptions { copy_on_write: cow, progress: None, page_cache: Default::default() })
                .unwrap();
        for (name, bytes) in &ts {
            let Some(Placed::Buffer(b)) = loaded.get(name) else { panic!("{name}: a buffer, not a view") };
            let b = b.lock().unwrap();
            assert!(!b.is_file_backed() && b.host_bytes().unwrap() == &bytes[..], "{name} cow={cow}");
        }
    }
    // The local file keeps today's behaviour: zero-copy views of the mapping.
    let lv = local.view("big").unwrap();
    assert!(lv.maps() && lv.mapped() == &ts[1].1[..]);

    // The CLI's inspect --json carries the report.
    let out = run_ok(&cli(), &["inspect", "--json", m.mnt.join("m.safetensors").to_str().unwrap()], &[]);
    let j = json(&out);
    assert_eq!(j["read_engine"].as_str().unwrap(), fuse.read_engine().as_str(), "{out}");
}

/// HOSTFIRST_MAP overrides the choice (read at each open); an unknown value refuses the open, naming it.
#[test]
fn hostfirst_map_overrides_the_choice() {
    let Some(m) = bindfs("override") else { return };
    std::fs::write(m.source().join("m.safetensors"), image(&tensors())).unwrap();
    let p = m.mnt.join("m.safetensors");
    let one = |map: &str| {
        let out = run(&cli(), &["inspect", "--json", p.to_str().unwrap()], &[("HOSTFIRST_MAP", Some(map))]);
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, out, err) = one("always");
    assert!(ok, "{err}");
    let r = json(&out)["read_engine"].as_str().unwrap().to_string();
    assert!(r.starts_with("fuse (") && r.contains(": mapped (") && r.contains("HOSTFIRST_MAP=always, although"), "{r}");
    let (ok, out, err) = one("auto");
    assert!(ok && json(&out)["read_engine"].as_str().unwrap().contains("owned reads"), "{err}");
    let (ok, _, err) = one("sometimes");
    assert!(!ok && err.contains("INVALID_ARGUMENT") && err.contains("HOSTFIRST_MAP='sometimes'"), "{err}");
    let local = m.source().join("m.safetensors");
    let out = run_ok(&cli(), &["inspect", "--json", local.to_str().unwrap()], &[("HOSTFIRST_MAP", Some("never"))]);
    let r = json(&out)["read_engine"].as_str().unwrap().to_string();
    assert!(r.contains("owned reads") && r.contains("HOSTFIRST_MAP=never"), "{r}");
}

/// A file truncated under a reader on FUSE: every read path gives TRUNCATED and the process lives (with a
/// mapping handed out, touching the lost pages would raise SIGBUS).
#[test]
fn a_file_truncated_under_a_reader_on_fuse_is_truncated_never_sigbus() {
    let Some(m) = bindfs("truncate") else { return };
    let ts = tensors();
    let src = m.source().join("m.safetensors");
    std::fs::write(&src, image(&ts)).unwrap();
    let f = TensorFile::open(m.mnt.join("m.safetensors")).unwrap();
    let v = f.view("big").unwrap();
    let plan = Plan::make(&f, &Rules::parse(["*=host"]).unwrap()).unwrap();
    // Truncated on the disk beneath the mount, as another machine or process would.
    std::fs::OpenOptions::new().write(true).open(&src).unwrap().set_len(4096).unwrap();
    let mut buf = vec![0u8; ts[1].1.len()];
    assert_eq!(v.read_at(0, &mut buf).unwrap_err().status(), Status::Truncated);
    let e = export_view(&v, Form::Versioned, CopyPolicy::IfNeeded, None).err().expect("the export fails");
    assert_eq!(e.status(), Status::Truncated, "{}", e.message());
    let e = load_with(&f, &plan, LoadOptions::default()).err().expect("the load fails");
    assert_eq!(e.status(), Status::Truncated, "{}", e.message());
    assert!(!v.prefault().unwrap(), "nothing mapped, nothing faulted");
}
