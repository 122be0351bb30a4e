//! Remote sources over the real S3 protocol (issue 46): moto's S3 server (pip "moto[server]", installed on first
//! use into a venv under target/, started on a free loopback port, stopped when the test binary exits) with
//! signed requests, XML errors and ETags. Through the C API (Rust FFI) and the CLI (`hostfirst inspect s3://...`).
//! Saves to s3:// (issue 46, part 4) through `hostfirst_writer_open` with a URL: byte-exact against a local save,
//! multipart (5 MiB parts, `HOSTFIRST_REMOTE_PART_SIZE`), split sets, and failed saves that leave nothing.

use crate::common::{cli, run};
use crate::file_support::last_error;
use crate::remote::{copy, model, open};
use hostfirst::ffi::*;
use hostfirst::{DType, Status};
use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;

const SECRET: &str = "s3cr3t-that-never-shows";

struct Moto {
    endpoint: String,
    python: PathBuf,
    _child: Child,
}

/// The venv's python, installing moto[server] into target/moto-venv when it is not there yet.
fn moto_python() -> PathBuf {
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/moto-venv");
    let py = venv.join("bin/python");
    let ok = |py: &Path| Command::new(py).args(["-c", "import moto.server, boto3"]).status().is_ok_and(|s| s.success());
    if !ok(&py) {
        let st = Command::new("python3").arg("-m").arg("venv").arg(&venv).status().expect("python3 -m venv");
        assert!(st.success(), "python3 -m venv {} failed (Debian: apt-get install python3-venv)", venv.display());
        let st = Command::new(&py)
            .args(["-m", "pip", "install", "-q", "--disable-pip-version-check", "moto[server]"])
            .status()
            .expect("pip install moto[server]");
        assert!(st.success() && ok(&py), "pip install moto[server] into {} failed", venv.display());
    }
    py
}

fn moto() -> &'static Moto {
    static M: OnceLock<Moto> = OnceLock::new();
    M.get_or_init(|| {
        let python = moto_python();
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        // The shell's `read` ends the server when this process exits (its stdin pipe closes).
        let child = Command::new("sh")
            .arg("-c")
            .arg("\"$0\" -m moto.server -H 127.0.0.1 -p \"$1\" >/dev/null 2>&1 & pid=$!; read _; kill $pid")
            .arg(&python)
            .arg(port.to_string())
            .stdin(Stdio::piped())
            .spawn()
            .expect("start moto's server");
        let endpoint = format!("http://127.0.0.1:{port}");
        let t0 = std::time::Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(t0.elapsed().as_secs() < 60, "moto's server did not start on port {port}");
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        for (k, v) in [
            ("AWS_ACCESS_KEY_ID", "testing"),
            ("AWS_SECRET_ACCESS_KEY", SECRET),
            ("AWS_REGION", "us-east-1"),
            ("AWS_ENDPOINT_URL", endpoint.as_str()),
            ("AWS_ALLOW_HTTP", "true"),
            // Saves here upload in S3's smallest parts, so that a save of > 10 MiB takes several.
            ("HOSTFIRST_REMOTE_PART_SIZE", "5242880"),
        ] {
            std::env::set_var(k, v);
        }
        let m = Moto { endpoint, python, _child: child };
        boto(&m, "s3.create_bucket(Bucket='models')");
        m
    })
}

/// Runs a line of boto3 against the server (`s3` is the client).
fn boto(m: &Moto, code: &str) {
    boto_out(m, code);
}

/// [`boto`], returning what the code prints.
fn boto_out(m: &Moto, code: &str) -> String {
    let script = format!(
        "import boto3\ns3 = boto3.client('s3', endpoint_url='{}', region_name='us-east-1', aws_access_key_id='testing', \
         aws_secret_access_key='x')\n{code}\n",
        m.endpoint
    );
    let out = Command::new(&m.python).args(["-c", &script]).output().unwrap();
    assert!(out.status.success(), "boto3: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn put(key: &str, bytes: &[u8]) {
    let m = moto();
    let f =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("moto-{}-{}", std::process::id(), key.replace('/', "_")));
    std::fs::write(&f, bytes).unwrap();
    boto(m, &format!("s3.upload_file({:?}, 'models', {key:?})", f.to_str().unwrap()));
    std::fs::remove_file(&f).unwrap();
}

fn tensor(image: &[u8], name: &str) -> Vec<u8> {
    let f = hostfirst::TensorFile::from_bytes(image.to_vec()).unwrap();
    f.view(name).unwrap().to_vec().unwrap()
}

#[test]
fn an_s3_object_opens_and_reads_byte_exact() {
    let img = model(4, 3000, 0);
    put("dir/m.safetensors", &img);
    let f = open("s3://models/dir/m.safetensors").unwrap_or_else(|s| panic!("{s:?}: {}", last_error()));
    for t in ["t000", "t003"] {
        assert_eq!(copy(f, t).unwrap(), tensor(&img, t), "{t}");
    }
    assert_eq!(hostfirst_file_free(f), Status::Ok);
}

#[test]
fn a_missing_s3_object_is_not_found_and_no_message_shows_a_credential() {
    moto();
    assert_eq!(open("s3://models/dir/none.safetensors").unwrap_err(), Status::NotFound, "{}", last_error());
    let m = last_error();
    assert!(m.contains("s3://models/dir/none.safetensors") && !m.contains(SECRET), "{m}");
    assert_eq!(open("s3://no-such-bucket/k.safetensors").unwrap_err(), Status::NotFound, "{}", last_error());
    assert!(!last_error().contains(SECRET), "{}", last_error());
}

#[test]
fn a_replaced_s3_object_fails_with_io() {
    let img = model(2, 5000, 0);
    put("swap.safetensors", &img);
    let f = open("s3://models/swap.safetensors").unwrap();
    let mut other = img.clone();
    let n = other.len();
    other[n - 10..].fill(0xAB);
    put("swap.safetensors", &other);
    assert_eq!(copy(f, "t001").unwrap_err(), Status::Io);
    assert!(last_error().contains("changed since it was opened"), "{}", last_error());
    assert_eq!(hostfirst_file_free(f), Status::Ok);
}

#[test]
fn an_s3_set_reads_its_parts_beside_the_index() {
    let (a, b) = (model(1, 100, 0), model(1, 50, 0));
    let hl = u64::from_le_bytes(b[..8].try_into().unwrap()) as usize;
    let mut b2 = b.clone();
    let h = String::from_utf8(b[8..8 + hl].to_vec()).unwrap().replace("\"t000\"", "\"u000\"");
    b2.splice(8..8 + hl, h.into_bytes());
    put("set/p1.safetensors", &a);
    put("set/p2.safetensors", &b2);
    put(
        "set/model.safetensors.index.json",
        br#"{"metadata":{},"weight_map":{"t000":"p1.safetensors","u000":"p2.safetensors"}}"#,
    );
    let f = open("s3://models/set/model.safetensors.index.json").unwrap_or_else(|s| panic!("{s:?}: {}", last_error()));
    assert_eq!(copy(f, "t000").unwrap(), tensor(&a, "t000"));
    assert_eq!(copy(f, "u000").unwrap(), tensor(&b2, "u000"));
    assert_eq!(hostfirst_file_free(f), Status::Ok);
}

#[test]
fn the_cli_inspects_an_s3_object() {
    let img = model(3, 64, 0);
    put("cli/m.safetensors", &img);
    let m = moto();
    let env: Vec<(&str, Option<&str>)> = vec![
        ("AWS_ACCESS_KEY_ID", Some("testing")),
        ("AWS_SECRET_ACCESS_KEY", Some(SECRET)),
        ("AWS_REGION", Some("us-east-1")),
        ("AWS_ENDPOINT_URL", Some(m.endpoint.as_str())),
        ("AWS_ALLOW_HTTP", Some("true")),
    ];
    let out = run(&cli(), &["inspect", "s3://models/cli/m.safetensors"], &env);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    for t in ["t000", "t001", "t002"] {
        assert!(stdout.contains(t), "{stdout}");
    }
    let out = run(&cli(), &["inspect", "s3://models/cli/none.safetensors"], &env);
    assert!(!out.status.success());
    let mut all = String::from_utf8_lossy(&out.stderr).into_owned();
    all.push_str(&String::from_utf8_lossy(&out.stdout));
    assert!(all.contains("NOT_FOUND") && !all.contains(SECRET), "{all}");
}

// ---- saving (issue 46, part 4) ------------------------------------------------------------------------------

/// A tensor's bytes: a pattern that differs per tensor and per position (a 4 KiB block, each copy stamped with
/// its number: built by copies, as a byte-by-byte loop takes most of a minute for 11 MiB in the test profile).
fn pattern(n: usize, k: u8) -> Vec<u8> {
    let block: Vec<u8> =
        (0..4096u64).map(|j| j.wrapping_mul(2_654_435_761).wrapping_add(k as u64 * 97).to_le_bytes()[3]).collect();
    let mut v = Vec::with_capacity(n + 4096);
    for b in 0..n.div_ceil(4096) as u64 {
        let at = v.len();
        v.extend_from_slice(&block);
        v[at..at + 8].copy_from_slice(&(b ^ ((k as u64) << 56)).to_le_bytes());
    }
    v.truncate(n);
    v
}

/// What a finished save reports.
#[derive(Debug)]
struct Saved {
    parts: u64,
    file_bytes: u64,
    index: Option<String>,
}

/// What a save is given: host tensors (U8, one dimension) and views of an open file.
enum Src<'a> {
    Host(&'a [u8]),
    View(*mut hostfirst_view),
}

/// Saves `tensors` (and one metadata entry) through `hostfirst_writer_open(target)`; `max_part_bytes` splits.
/// Returns the writer's info, or the status and message of the open or finish that failed.
fn save(target: &str, tensors: &[(&str, Src<'_>)], max_part_bytes: u64) -> Result<Saved, (Status, String)> {
    let c = CString::new(target).unwrap();
    let opts = hostfirst_writer_options { max_part_bytes, no_sync: 1, ..Default::default() };
    let mut w: *mut hostfirst_writer = std::ptr::null_mut();
    let st = hostfirst_writer_open(c.as_ptr(), &opts, &mut w);
    if st != Status::Ok {
        assert!(w.is_null());
        return Err((st, last_error()));
    }
    for (name, src) in tensors {
        let n = CString::new(*name).unwrap();
        let st = match src {
            Src::Host(b) => {
                let shape = [b.len() as u64];
                hostfirst_writer_add_host(w, n.as_ptr(), DType::U8 as _, shape.as_ptr(), 1, b.as_ptr().cast(), b.len())
            }
            Src::View(v) => hostfirst_writer_add_view(w, n.as_ptr(), *v),
        };
        assert_eq!(st, Status::Ok, "{name}: {}", last_error());
    }
    let (k, v) = (CString::new("format").unwrap(), CString::new("pt").unwrap());
    assert_eq!(hostfirst_writer_set_metadata(w, &k.as_ptr(), &v.as_ptr(), 1), Status::Ok);
    let mut info: hostfirst_writer_info = unsafe { std::mem::zeroed() };
    info.struct_size = std::mem::size_of::<hostfirst_writer_info>();
    let st = hostfirst_writer_finish(w, &mut info);
    let msg = last_error();
    // The index's text lives as long as the writer: copied before it is freed.
    let index = (st == Status::Ok && !info.index.is_null())
        .then(|| unsafe { std::ffi::CStr::from_ptr(info.index) }.to_string_lossy().into_owned());
    let saved = Saved { parts: info.parts, file_bytes: info.file_bytes, index };
    assert_eq!(hostfirst_writer_free(w), Status::Ok);
    match st {
        Status::Ok => Ok(saved),
        st => Err((st, msg)),
    }
}

/// The object `key` of the bucket, downloaded with boto3.
fn get(key: &str) -> Vec<u8> {
    let m = moto();
    let f = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "moto-get-{}-{}",
        std::process::id(),
        key.replace('/', "_")
    ));
    boto(m, &format!("s3.download_file('models', {key:?}, {:?})", f.to_str().unwrap()));
    let b = std::fs::read(&f).unwrap();
    std::fs::remove_file(&f).unwrap();
    b
}

/// The keys of the bucket under `prefix`, and the multipart uploads pending under it.
fn listing(prefix: &str) -> (Vec<String>, Vec<String>) {
    let m = moto();
    let objects = boto_out(
        m,
        &format!("print(' '.join(o['Key'] for o in s3.list_objects_v2(Bucket='models', Prefix={prefix:?}).get('Contents', [])))"),
    );
    let uploads = boto_out(
        m,
        &format!("print(' '.join(u['Key'] for u in s3.list_multipart_uploads(Bucket='models', Prefix={prefix:?}).get('Uploads', [])))"),
    );
    let words = |s: String| s.split_whitespace().map(str::to_string).collect::<Vec<_>>();
    (words(objects), words(uploads))
}

fn local_dir(name: &str) -> PathBuf {
    // Not common::scratch, whose first use builds the library and CLI (most of a minute on a busy machine).
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("remote-save-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A save to s3:// writes the bytes a local save of the same declarations writes (header, then data in layout
/// order), as a multipart upload of 5 MiB parts (its ETag says how many), and reads back through
/// `hostfirst_file_open`.
#[test]
fn a_save_to_s3_is_byte_exact_with_a_local_save_in_several_parts() {
    moto();
    let (a, b, c) = (pattern(6 << 20, 1), pattern((5 << 20) + 123, 2), pattern(1000, 3));
    let tensors = [("b", Src::Host(&b)), ("a", Src::Host(&a)), ("c", Src::Host(&c))];
    let dir = local_dir("exact");
    let local = dir.join("m.safetensors");
    save(local.to_str().unwrap(), &tensors, 0).unwrap();
    let info = save("s3://models/saved/m.safetensors", &tensors, 0).unwrap();
    let want = std::fs::read(&local).unwrap();
    assert_eq!(info.file_bytes, want.len() as u64);
    let got = get("saved/m.safetensors");
    assert_eq!(got.len(), want.len());
    assert!(got == want, "the object differs from the local save");
    let etag = boto_out(moto(), "print(s3.head_object(Bucket='models', Key='saved/m.safetensors')['ETag'])");
    let parts = (want.len() as u64).div_ceil(5 << 20);
    assert!(parts >= 3 && etag.ends_with(&format!("-{parts}\"")), "a multipart upload of {parts} parts: {etag}");
    let f = open("s3://models/saved/m.safetensors").unwrap_or_else(|s| panic!("{s:?}: {}", last_error()));
    assert_eq!(copy(f, "c").unwrap(), c);
    assert_eq!(hostfirst_file_free(f), Status::Ok);
    assert_eq!(listing("saved/").1, Vec::<String>::new(), "no upload left pending");
    // http(s) takes no upload: refused at open, naming the URL.
    let (st, msg) = save("https://127.0.0.1:9/m.safetensors", &tensors, 0).unwrap_err();
    assert_eq!(st, Status::Unsupported, "{msg}");
    assert!(msg.contains("https://127.0.0.1:9/m.safetensors"), "{msg}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A split set saved to s3:// uploads every part file (each the local save's bytes), then the index, and
/// opens through its index URL.
#[test]
fn a_split_set_saved_to_s3_reads_back_through_its_index() {
    moto();
    let ts: Vec<Vec<u8>> = (0..4u8).map(|k| pattern(3000 + k as usize * 100, k)).collect();
    let tensors: Vec<(&str, Src<'_>)> =
        ["t0", "t1", "t2", "t3"].iter().zip(&ts).map(|(n, b)| (*n, Src::Host(b))).collect();
    let dir = local_dir("set");
    let info = save(dir.join("m.safetensors").to_str().unwrap(), &tensors, 6500).unwrap();
    assert!(info.parts >= 2 && info.index.is_some(), "{info:?}");
    let info = save("s3://models/set-saved/m.safetensors", &tensors, 6500).unwrap();
    let index = info.index.unwrap();
    assert_eq!(index, "s3://models/set-saved/m.safetensors.index.json");
    let (mut keys, pending) = listing("set-saved/");
    keys.sort();
    let mut want: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| format!("set-saved/{}", e.unwrap().file_name().to_string_lossy()))
        .collect();
    want.sort();
    assert_eq!(keys, want, "every file of the local set, and nothing else");
    assert!(pending.is_empty(), "{pending:?}");
    for k in &keys {
        let name = k.trim_start_matches("set-saved/");
        assert!(get(k) == std::fs::read(dir.join(name)).unwrap(), "{k} differs from the local save");
    }
    let f = open(&index).unwrap_or_else(|s| panic!("{s:?}: {}", last_error()));
    for (k, b) in ts.iter().enumerate() {
        assert_eq!(&copy(f, &format!("t{k}")).unwrap(), b);
    }
    assert_eq!(hostfirst_file_free(f), Status::Ok);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A save whose source fails half-way (a view of a file truncated before finish) returns the source's status
/// (TRUNCATED) naming the URL and no credential, and leaves no object and no pending multipart upload: for one
/// file (parts of it uploaded before the failure), and for a split set (its first part file uploaded whole:
/// aborted too, and no index).
#[test]
fn a_failed_save_to_s3_leaves_no_object_and_no_pending_upload() {
    moto();
    let dir = local_dir("failed");
    let big = pattern(11 << 20, 5);
    for (prefix, split) in [("failed/", 0u64), ("failed-set/", 12 << 20)] {
        // The view's file: one tensor of 3 MiB, truncated to its header after the view is taken.
        let src = dir.join("src.safetensors");
        let tail = pattern(3 << 20, 6);
        save(src.to_str().unwrap(), &[("z", Src::Host(&tail))], 0).unwrap();
        let f = open(src.to_str().unwrap()).unwrap();
        let name = CString::new("z").unwrap();
        let mut v: *mut hostfirst_view = std::ptr::null_mut();
        assert_eq!(hostfirst_file_view(f, name.as_ptr(), &mut v), Status::Ok);
        let header = std::fs::metadata(&src).unwrap().len() - tail.len() as u64;
        std::fs::OpenOptions::new().write(true).open(&src).unwrap().set_len(header + 1000).unwrap();
        // "a" (11 MiB, host) goes first in the file (or the first part file): two 5 MiB parts are uploaded before
        // the view fails.
        let url = format!("s3://models/{prefix}m.safetensors");
        let (st, msg) = save(&url, &[("a", Src::Host(&big)), ("z", Src::View(v))], split).unwrap_err();
        assert_eq!(st, Status::Truncated, "{msg}");
        assert!(msg.contains(&url) && !msg.contains(SECRET), "{msg}");
        assert_eq!(hostfirst_view_free(v), Status::Ok);
        assert_eq!(hostfirst_file_free(f), Status::Ok);
        assert_eq!(open(&url).unwrap_err(), Status::NotFound, "{}", last_error());
        let (keys, pending) = listing(prefix);
        assert!(keys.is_empty(), "{prefix}: objects left: {keys:?}");
        assert!(pending.is_empty(), "{prefix}: multipart uploads left pending: {pending:?}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A save cancelled by its progress callback returns CANCELLED and leaves nothing.
#[test]
fn a_cancelled_save_to_s3_leaves_nothing() {
    moto();
    unsafe extern "C" fn stop(done: u64, _total: u64, _user: *mut std::ffi::c_void) -> i32 {
        (done > 0) as i32
    }
    let a = pattern(6 << 20, 7);
    let b = pattern(100, 8);
    let c = CString::new("s3://models/cancelled/m.safetensors").unwrap();
    let opts = hostfirst_writer_options { progress: Some(stop), ..Default::default() };
    let mut w: *mut hostfirst_writer = std::ptr::null_mut();
    assert_eq!(hostfirst_writer_open(c.as_ptr(), &opts, &mut w), Status::Ok, "{}", last_error());
    for (n, t) in [("a", &a), ("b", &b)] {
        let n = CString::new(n).unwrap();
        let shape = [t.len() as u64];
        assert_eq!(
            hostfirst_writer_add_host(w, n.as_ptr(), DType::U8 as _, shape.as_ptr(), 1, t.as_ptr().cast(), t.len()),
            Status::Ok
        );
    }
    assert_eq!(hostfirst_writer_finish(w, std::ptr::null_mut()), Status::Cancelled, "{}", last_error());
    assert_eq!(hostfirst_writer_free(w), Status::Ok);
    let (keys, pending) = listing("cancelled/");
    assert!(keys.is_empty() && pending.is_empty(), "{keys:?} {pending:?}");
}

/// `hostfirst convert IN s3://...` saves through the writer: the object is the file a local convert writes.
#[test]
fn the_cli_converts_to_s3() {
    let m = moto();
    let dir = local_dir("cli");
    let input = dir.join("in.safetensors");
    std::fs::write(&input, model(3, 4096, 0)).unwrap();
    let env: Vec<(&str, Option<&str>)> = vec![
        ("AWS_ACCESS_KEY_ID", Some("testing")),
        ("AWS_SECRET_ACCESS_KEY", Some(SECRET)),
        ("AWS_REGION", Some("us-east-1")),
        ("AWS_ENDPOINT_URL", Some(m.endpoint.as_str())),
        ("AWS_ALLOW_HTTP", Some("true")),
    ];
    let local = dir.join("out.safetensors");
    for out in [local.to_str().unwrap(), "s3://models/cli-saved/out.safetensors"] {
        let o = run(&cli(), &["convert", input.to_str().unwrap(), out], &env);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    assert!(get("cli-saved/out.safetensors") == std::fs::read(&local).unwrap());
    std::fs::remove_dir_all(&dir).unwrap();
}
