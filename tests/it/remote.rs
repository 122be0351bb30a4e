//! Remote sources (issue 46) through the C API, against local servers on loopback (no internet): the
//! fault-injecting server of tests/remote/fault_server.py (Python's standard library) for range handling,
//! request counts, 503s, resets, cut bodies, 200-for-206, 403, 404 and replaced objects; and moto's S3 server
//! (tests/it/remote_s3.rs) for the real protocol. Every load is compared byte for byte with the local file.

use crate::file_support::{image, last_error};
use hostfirst::ffi::*;
use hostfirst::Status;
use std::ffi::CString;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;

/// The fault server, started once for the test binary on a free port (it picks one; it prints it), serving
/// a folder of fixtures; killed when the binary exits (a guard in a static is never dropped, so the server
/// also exits by itself when its standard input closes).
pub struct Server {
    pub port: u16,
    pub dir: PathBuf,
    _child: Child,
}

pub fn server() -> &'static Server {
    static S: OnceLock<Server> = OnceLock::new();
    S.get_or_init(|| {
        // Two retries per request: enough for the flaky paths (two 503s), quick to give up on the down ones.
        std::env::set_var("HOSTFIRST_REMOTE_RETRIES", "2");
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("remote-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        fixtures(&dir);
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/remote/fault_server.py");
        // The shell's `read` ends the server when this process exits (its stdin pipe closes).
        let mut child = Command::new("sh")
            .arg("-c")
            .arg("python3 \"$0\" \"$1\" & pid=$!; read _; kill $pid")
            .arg(&script)
            .arg(&dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 runs the fault server");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let port = line.trim().parse().unwrap_or_else(|_| panic!("the fault server printed {line:?}"));
        Server { port, dir, _child: child }
    })
}

/// Tensors of `n` bytes each, filled with a pattern that differs per tensor and per byte.
pub fn model(tensors: usize, n: usize, metadata_bytes: usize) -> Vec<u8> {
    let mut h = format!(r#"{{"__metadata__":{{"pad":"{}"}}"#, "x".repeat(metadata_bytes));
    let mut data = Vec::new();
    for t in 0..tensors {
        h.push_str(&format!(
            r#","t{t:03}":{{"dtype":"U8","shape":[{n}],"data_offsets":[{},{}]}}"#,
            data.len(),
            data.len() + n
        ));
        data.extend((0..n).map(|i| (i * 7 + t * 13 + i / 251) as u8));
    }
    h.push('}');
    image(&h, &data)
}

fn fixtures(dir: &Path) {
    std::fs::write(dir.join("small.safetensors"), model(4, 1000, 0)).unwrap();
    // A header larger than the first request (256 KiB): the open needs a second one.
    std::fs::write(dir.join("bigheader.safetensors"), model(3, 100, 300 << 10)).unwrap();
    // 8 tensors of 512 KiB: a load of one reads that tensor, not the file.
    std::fs::write(dir.join("large.safetensors"), model(8, 512 << 10, 0)).unwrap();
    // 16 tensors of 1 MiB: a whole load is 16 ranged GETs of 1 MiB (crate::remote::part_bytes), in flight together.
    std::fs::write(dir.join("many.safetensors"), model(16, 1 << 20, 0)).unwrap();
    // 256 tensors of 4 KiB: a whole load merges neighbours into a few ranged GETs, not one per tensor.
    std::fs::write(dir.join("tiny.safetensors"), model(256, 4096, 0)).unwrap();
    // The replaced object: version 2 has other bytes (and the same layout).
    std::fs::write(dir.join("swap.safetensors"), model(2, 4096, 0)).unwrap();
    let mut v2 = model(2, 4096, 0);
    let n = v2.len();
    v2[n - 4096..].fill(0xEE);
    std::fs::write(dir.join("swap.safetensors.v2"), v2).unwrap();
    // A set: an index and two parts beside it.
    std::fs::write(dir.join("p-1.safetensors"), model(2, 64, 0)).unwrap();
    let mut p2 = model(2, 32, 0);
    // Other names in the second part: t000, t001 -> u000, u001 (same lengths).
    let hl = u64::from_le_bytes(p2[..8].try_into().unwrap()) as usize;
    let h = String::from_utf8(p2[8..8 + hl].to_vec()).unwrap().replace("\"t0", "\"u0");
    p2.splice(8..8 + hl, h.into_bytes());
    std::fs::write(dir.join("p-2.safetensors"), p2).unwrap();
    std::fs::write(
        dir.join("set.safetensors.index.json"),
        r#"{"metadata":{},"weight_map":{"t000":"p-1.safetensors","t001":"p-1.safetensors","u000":"p-2.safetensors","u001":"p-2.safetensors"}}"#,
    )
    .unwrap();
}

/// One GET to the server's control paths.
fn control(path: &str) -> String {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", server().port)).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out.split("\r\n\r\n").nth(1).unwrap_or("").to_string()
}

/// (requests, body bytes) the server counted for paths under `/mode/`.
fn stats(mode: &str) -> (u64, u64) {
    let (requests, bytes, _) = stats3(mode);
    (requests, bytes)
}

/// (requests, body bytes, requests waiting at the gate together when it opened) for paths under `/mode/`.
fn stats3(mode: &str) -> (u64, u64, u64) {
    let t = control(&format!("/_stats/{mode}"));
    let mut it = t.split_whitespace().map(|x| x.parse::<u64>().unwrap());
    (it.next().unwrap(), it.next().unwrap(), it.next().unwrap())
}

/// Loads every tensor of `u` to cpu (one job) and checks each byte for byte against the local `file`.
fn load_all(u: &str, file: &str) {
    use hostfirst::place::{load, Placed, Plan, Rules};
    let f = hostfirst::TensorFile::open(u).unwrap_or_else(|e| panic!("{}", e.message()));
    let plan = Plan::make(&f, &Rules::parse(["*=cpu"]).unwrap()).unwrap();
    let loaded = load(&f, &plan, None).unwrap_or_else(|e| panic!("{}", e.message()));
    for i in 0..loaded.len() {
        let (name, placed) = loaded.at(i).unwrap();
        let Placed::Buffer(b) = placed else { panic!("{name}: a remote tensor is never a mapped view") };
        let b = b.lock().unwrap();
        let mut got = vec![0u8; b.nbytes() as usize];
        b.read_at(0, &mut got).unwrap();
        assert!(got == local(file, name), "{name} differs");
    }
}

fn url(mode: &str, name: &str) -> String {
    format!("http://127.0.0.1:{}/{mode}/{name}", server().port)
}

/// Opens `u` through `hostfirst_file_open` (the output untouched on failure). Shared with remote_s3.rs.
pub fn open(u: &str) -> Result<*mut hostfirst_file, Status> {
    let c = CString::new(u).unwrap();
    let mut f: *mut hostfirst_file = std::ptr::null_mut();
    match hostfirst_file_open(c.as_ptr(), &mut f) {
        Status::Ok => Ok(f),
        st => {
            assert!(f.is_null(), "output written on failure");
            Err(st)
        }
    }
}

/// Copies tensor `name` through `hostfirst_view_copy`; checks the view's data pointer is NULL (no mapping).
/// Shared with remote_s3.rs.
pub fn copy(f: *mut hostfirst_file, name: &str) -> Result<Vec<u8>, Status> {
    let c = CString::new(name).unwrap();
    let mut v: *mut hostfirst_view = std::ptr::null_mut();
    assert_eq!(hostfirst_file_view(f, c.as_ptr(), &mut v), Status::Ok, "{}", last_error());
    let mut info: hostfirst_view_info = unsafe { std::mem::zeroed() };
    info.struct_size = std::mem::size_of::<hostfirst_view_info>();
    assert_eq!(hostfirst_view_describe(v, &mut info), Status::Ok);
    assert!(info.data.is_null(), "a remote view has no mapping: its data pointer is NULL");
    let mut buf = vec![0u8; info.nbytes as usize];
    let mut need = 0u64;
    let st = hostfirst_view_copy(v, buf.as_mut_ptr().cast(), buf.len(), &mut need);
    assert_eq!(hostfirst_view_free(v), Status::Ok);
    if st == Status::Ok {
        Ok(buf)
    } else {
        Err(st)
    }
}

/// The bytes of tensor `name` in the local fixture `file`.
pub fn local(file: &str, name: &str) -> Vec<u8> {
    let f = hostfirst::TensorFile::open(server().dir.join(file)).unwrap();
    f.view(name).unwrap().to_vec().unwrap()
}

/// Each test uses its own mode (path prefix), so the server's counts are its own.
#[test]
fn header_in_one_request_and_tensors_byte_exact() {
    let before = stats("ok").0;
    let f = open(&url("ok", "small.safetensors")).unwrap_or_else(|s| panic!("{s:?}: {}", last_error()));
    assert_eq!(stats("ok").0 - before, 1, "a small file's header takes one request");
    for t in ["t000", "t001", "t002", "t003"] {
        assert_eq!(copy(f, t).unwrap(), local("small.safetensors", t), "{t}");
    }
    assert_eq!(hostfirst_file_free(f), Status::Ok);
}

#[test]
fn a_header_larger_than_the_first_request_takes_two() {
    let f = open(&url("ok2", "bigheader.safetensors")).unwrap_or_else(|s| panic!("{s:?}: {}", last_error()));
    assert_eq!(stats("ok2").0, 2, "length and first 256 KiB, then the rest of the header");
    assert_eq!(copy(f, "t002").unwrap(), local("bigheader.safetensors", "t002"));
    assert_eq!(hostfirst_file_free(f), Status::Ok);
}

#[test]
fn a_tensor_read_fetches_only_its_bytes() {
    let f = open(&url("lazy", "large.safetensors")).unwrap();
    let (_, opened) = stats("lazy");
    let got = copy(f, "t005").unwrap();
    assert_eq!(got, local("large.safetensors", "t005"));
    let (_, after) = stats("lazy");
    let fetched = after - opened;
    let need = got.len() as u64;
    // <= 1.25x the needed bytes (here exactly them; the first request's 256 KiB came with the open).
    assert!(fetched <= need + need / 4, "fetched {fetched} bytes for {need}");
    assert!(fetched >= need);
    assert_eq!(hostfirst_file_free(f), Status::Ok);
}

#[test]
fn throttling_resets_and_cut_bodies_are_retried() {
    for mode in ["flaky", "reset", "cut"] {
        let f = open(&url(mode, "small.safetensors")).unwrap_or_else(|s| panic!("{mode}: {s:?}: {}", last_error()));
        assert_eq!(copy(f, "t001").unwrap(), local("small.safetensors", "t001"), "{mode}");
        assert_eq!(hostfirst_file_free(f), Status::Ok);
    }
}

#[test]
fn a_server_that_stays_down_gives_io_naming_the_object() {
    let u = url("down", "small.safetensors");
    assert_eq!(open(&u).unwrap_err(), Status::Io);
    let m = last_error();
    assert!(m.contains(&u), "{m}");
    assert_eq!(stats("down").0, 3, "the first try and two retries (HOSTFIRST_REMOTE_RETRIES=2)");
}

#[test]
fn missing_and_forbidden_objects_have_their_statuses() {
    assert_eq!(open(&url("ok3", "nope.safetensors")).unwrap_err(), Status::NotFound);
    assert!(last_error().contains("no such object"), "{}", last_error());
    assert_eq!(open(&url("forbidden", "small.safetensors")).unwrap_err(), Status::PermissionDenied);
    assert!(last_error().contains("/forbidden/small.safetensors"), "{}", last_error());
}

#[test]
fn a_server_ignoring_range_is_unsupported_never_wrong_bytes() {
    assert_eq!(open(&url("full", "small.safetensors")).unwrap_err(), Status::Unsupported, "{}", last_error());
    assert!(last_error().contains("206"), "{}", last_error());
}

#[test]
fn a_replaced_object_fails_with_io_never_mixed_bytes() {
    let f = open(&url("replaced", "swap.safetensors")).unwrap();
    assert_eq!(copy(f, "t001").unwrap_err(), Status::Io);
    assert!(last_error().contains("changed since it was opened"), "{}", last_error());
    assert_eq!(hostfirst_file_free(f), Status::Ok);
}

#[test]
fn a_set_opens_its_parts_beside_the_index() {
    let f = open(&url("set", "set.safetensors.index.json")).unwrap_or_else(|s| panic!("{s:?}: {}", last_error()));
    let mut n = 0usize;
    assert_eq!(hostfirst_file_tensor_count(f, &mut n), Status::Ok);
    assert_eq!(n, 4);
    assert_eq!(copy(f, "t001").unwrap(), local("p-1.safetensors", "t001"));
    assert_eq!(copy(f, "u000").unwrap(), local("p-2.safetensors", "u000"));
    assert_eq!(hostfirst_file_free(f), Status::Ok);
    // A part that is not there: INVALID_INDEX, as for a local set.
    std::fs::write(
        server().dir.join("broken.safetensors.index.json"),
        r#"{"metadata":{},"weight_map":{"t000":"p-1.safetensors","x":"gone.safetensors"}}"#,
    )
    .unwrap();
    assert_eq!(open(&url("set", "broken.safetensors.index.json")).unwrap_err(), Status::InvalidIndex);
    assert!(last_error().contains("gone.safetensors"), "{}", last_error());
}

#[test]
fn a_whole_load_is_byte_exact() {
    use hostfirst::place::{load, Placed, Plan, Rules};
    let file = hostfirst::TensorFile::open(url("load", "large.safetensors")).unwrap();
    // `host` on a file with no mapping becomes cpu copies, as for a file read with owned reads.
    let plan = Plan::make(&file, &Rules::parse(["*=host"]).unwrap()).unwrap();
    let loaded = load(&file, &plan, None).unwrap();
    assert_eq!(loaded.len(), 8);
    for i in 0..loaded.len() {
        let (name, placed) = loaded.at(i).unwrap();
        let Placed::Buffer(b) = placed else { panic!("{name}: a remote tensor is never a mapped view") };
        let b = b.lock().unwrap();
        let mut got = vec![0u8; b.nbytes() as usize];
        b.read_at(0, &mut got).unwrap();
        assert_eq!(got, local("large.safetensors", name), "{name}");
    }
    let (_, bytes) = stats("load");
    let data = std::fs::metadata(server().dir.join("large.safetensors")).unwrap().len();
    assert!(bytes <= data + (256 << 10), "a whole load fetched {bytes} bytes of a {data}-byte object");
}

/// A child after `fork()` reads the parent's open remote file with a runtime and connections of its own: the
/// parent's runtime threads do not exist in the child (using it would wait forever: the child's alarm turns
/// that into a failure), and the parent's pooled connections are the parent's sockets.
#[test]
fn a_forked_child_reads_with_its_own_runtime() {
    crate::common::alone(concat!(module_path!(), "::a_forked_child_reads_with_its_own_runtime"), || {
        let f = open(&url("fork", "small.safetensors")).unwrap();
        assert_eq!(copy(f, "t000").unwrap(), local("small.safetensors", "t000"));
        let want = local("small.safetensors", "t002");
        // SAFETY: the child only reads through the library (its fork handlers keep its locks usable) and exits.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            unsafe { libc::alarm(30) };
            let ok = copy(f, "t002").is_ok_and(|b| b == want);
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        let mut st = 0;
        assert_eq!(unsafe { libc::waitpid(pid, &mut st, 0) }, pid);
        assert!(libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 0, "the child failed or hung (wait status {st})");
        // The parent's runtime still serves the parent.
        assert_eq!(copy(f, "t001").unwrap(), local("small.safetensors", "t001"));
        assert_eq!(hostfirst_file_free(f), Status::Ok);
    });
}

/// A whole load keeps many ranged GETs in flight (crate::remote::CONCURRENCY), not one per core: the gate of
/// the fault server holds every data request until 8 wait together (a client with fewer in flight leaves it
/// closed until its 10 s pass, and the count shows its depth). 16 MiB in 16 parts of 1 MiB.
#[test]
fn a_whole_load_keeps_many_requests_in_flight() {
    load_all(&url("gate", "many.safetensors"), "many.safetensors");
    let (requests, bytes, together) = stats3("gate");
    assert!(together >= 8, "{together} ranged GETs were in flight together; want at least 8 ({requests} requests)");
    let data = std::fs::metadata(server().dir.join("many.safetensors")).unwrap().len();
    assert!(bytes <= data + (256 << 10), "a whole load fetched {bytes} bytes of a {data}-byte object");
}

/// A whole load merges neighbouring small tensors into one ranged GET (up to a part), within the
/// over-read bound: 256 tensors of 4 KiB (1 MiB) take the open's request and at most 2 more, not 256.
#[test]
fn a_whole_load_of_small_tensors_takes_few_requests() {
    load_all(&url("few", "tiny.safetensors"), "tiny.safetensors");
    let (requests, bytes) = stats("few");
    assert!(requests <= 3, "{requests} requests for 256 small tensors");
    let data = std::fs::metadata(server().dir.join("tiny.safetensors")).unwrap().len();
    assert!(bytes <= data + (256 << 10), "a whole load fetched {bytes} bytes of a {data}-byte object");
}

// ---- Settings and the local cache (issue 46, parts 1 and 2). The settings are process-wide, so each test runs
// alone in a child process of its own (with its own fault server and counts).

/// Configures the process's remote settings: `cache` as the cache folder (None: none), `retries` as
/// `max_retries` (0: not configured), `concurrency` as `max_concurrency` (0: not configured).
fn configure(cache: Option<&Path>, retries: i32, concurrency: u32) -> Status {
    let mut o: hostfirst_remote_options = unsafe { std::mem::zeroed() };
    assert_eq!(hostfirst_remote_options_init(&mut o, std::mem::size_of::<hostfirst_remote_options>()), Status::Ok);
    let dir = cache.map(|d| CString::new(d.to_str().unwrap()).unwrap());
    o.cache_dir = dir.as_ref().map_or(std::ptr::null(), |d| d.as_ptr());
    o.max_retries = retries;
    o.max_concurrency = concurrency;
    hostfirst_remote_configure(&o)
}

/// Runs `body` alone in a child process (the settings are process-wide), then removes the child's fixtures.
fn alone_remote(test: &str, body: impl FnOnce()) {
    crate::common::alone(test, || {
        body();
        let _ = std::fs::remove_dir_all(&server().dir);
    });
}

/// A fresh folder for a test's cache.
fn cache_dir(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("rcache-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// The chunk files under a cache folder.
fn chunks(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                todo.push(p);
            } else if p.extension().is_some_and(|x| x == "chunk") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// Opens `u`, copies every tensor and checks each against the local fixture `file`; returns the data bytes the
/// server sent for `mode` after the open (the load's own bytes).
fn open_and_load(mode: &str, file: &str, tensors: &[&str]) -> u64 {
    let f = open(&url(mode, file)).unwrap_or_else(|s| panic!("{s:?}: {}", last_error()));
    let (_, opened) = stats(mode);
    for t in tensors {
        assert_eq!(copy(f, t).unwrap_or_else(|s| panic!("{t}: {s:?}: {}", last_error())), local(file, t), "{t}");
    }
    assert_eq!(hostfirst_file_free(f), Status::Ok);
    stats(mode).1 - opened
}

const LARGE: &[&str] = &["t000", "t001", "t002", "t003", "t004", "t005", "t006", "t007"];

#[test]
fn with_a_cache_a_second_open_and_load_moves_no_data_bytes() {
    alone_remote(concat!(module_path!(), "::with_a_cache_a_second_open_and_load_moves_no_data_bytes"), || {
        let dir = cache_dir("second");
        assert_eq!(configure(Some(&dir), 0, 0), Status::Ok, "{}", last_error());
        let first = open_and_load("c1", "large.safetensors", LARGE);
        assert!(first >= 8 * (512 << 10) - (256 << 10), "the first load fetched {first} bytes");
        assert!(!chunks(&dir).is_empty(), "no chunk was kept under {}", dir.display());
        let (requests, _) = stats("c1");
        let second = open_and_load("c1", "large.safetensors", LARGE);
        assert_eq!(second, 0, "the second load fetched {second} data bytes from the server");
        assert_eq!(stats("c1").0 - requests, 1, "the second open+load: its first request only");
        assert_eq!(configure(None, 0, 0), Status::Ok);
        let _ = std::fs::remove_dir_all(&dir);
    });
}

#[test]
fn a_replaced_object_is_fetched_anew_never_served_from_the_cache() {
    alone_remote(concat!(module_path!(), "::a_replaced_object_is_fetched_anew_never_served_from_the_cache"), || {
        let dir = cache_dir("replaced");
        assert_eq!(configure(Some(&dir), 0, 0), Status::Ok, "{}", last_error());
        let path = server().dir.join("rep.safetensors");
        std::fs::write(&path, model(2, 4096, 0)).unwrap();
        assert!(open_and_load("c2", "rep.safetensors", &["t000", "t001"]) > 0);
        // Version 2: the same layout, other bytes (the server's ETag is the content's digest).
        let mut v2 = model(2, 4096, 0);
        let n = v2.len();
        v2[n - 8192..].fill(0x5A);
        std::fs::write(&path, &v2).unwrap();
        // open_and_load compares with the local file, which is now version 2.
        let moved = open_and_load("c2", "rep.safetensors", &["t000", "t001"]);
        assert!(moved > 0, "the replaced object's data came from the cache");
        assert_eq!(local("rep.safetensors", "t001"), vec![0x5A; 4096]);
        assert_eq!(configure(None, 0, 0), Status::Ok);
        let _ = std::fs::remove_dir_all(&dir);
    });
}

#[test]
fn a_truncated_or_corrupt_chunk_is_fetched_again() {
    alone_remote(concat!(module_path!(), "::a_truncated_or_corrupt_chunk_is_fetched_again"), || {
        let dir = cache_dir("damaged");
        assert_eq!(configure(Some(&dir), 0, 0), Status::Ok, "{}", last_error());
        open_and_load("c3", "large.safetensors", LARGE);
        let files = chunks(&dir);
        assert!(!files.is_empty());
        let whole: Vec<u64> = files.iter().map(|p| std::fs::metadata(p).unwrap().len()).collect();
        // A half-written chunk (as a crash before the rename could never leave, but a full disk or a user might).
        let bytes = std::fs::read(&files[0]).unwrap();
        std::fs::write(&files[0], &bytes[..bytes.len() / 2]).unwrap();
        let moved = open_and_load("c3", "large.safetensors", LARGE);
        assert!(moved > 0, "a truncated chunk was used");
        assert_eq!(std::fs::metadata(&files[0]).unwrap().len(), whole[0], "the refetched chunk was kept whole");
        // A chunk of the right length with one byte changed.
        let mut bytes = std::fs::read(&files[0]).unwrap();
        bytes[100] ^= 0xFF;
        std::fs::write(&files[0], &bytes).unwrap();
        let moved = open_and_load("c3", "large.safetensors", LARGE);
        assert!(moved > 0, "a corrupt chunk was used");
        assert_eq!(open_and_load("c3", "large.safetensors", LARGE), 0, "the chunk was replaced by a good one");
        assert_eq!(configure(None, 0, 0), Status::Ok);
        let _ = std::fs::remove_dir_all(&dir);
    });
}

#[test]
fn no_cache_without_the_setting_and_the_environment_names_one() {
    alone_remote(concat!(module_path!(), "::no_cache_without_the_setting_and_the_environment_names_one"), || {
        std::env::remove_var("HOSTFIRST_REMOTE_CACHE");
        let data = 8 * (512 << 10) - (256 << 10);
        assert!(open_and_load("c4", "large.safetensors", LARGE) >= data);
        assert!(open_and_load("c4", "large.safetensors", LARGE) >= data, "a second load without a cache");
        // A relative folder in the environment is refused (never a cache in whatever folder the process runs in).
        std::env::set_var("HOSTFIRST_REMOTE_CACHE", "relative-cache");
        assert_eq!(open(&url("c4", "small.safetensors")).unwrap_err(), Status::InvalidArgument);
        assert!(last_error().contains("HOSTFIRST_REMOTE_CACHE"), "{}", last_error());
        // The environment names a cache; a configured folder wins over it; NULL goes back to the environment.
        let (env_dir, conf_dir) = (cache_dir("env"), cache_dir("conf"));
        std::env::set_var("HOSTFIRST_REMOTE_CACHE", &env_dir);
        open_and_load("c4", "large.safetensors", LARGE);
        assert!(!chunks(&env_dir).is_empty(), "HOSTFIRST_REMOTE_CACHE was not used");
        assert_eq!(open_and_load("c4", "large.safetensors", LARGE), 0);
        assert_eq!(configure(Some(&conf_dir), 0, 0), Status::Ok);
        let before = chunks(&env_dir).len();
        assert!(open_and_load("c4", "large.safetensors", LARGE) >= data, "the configured folder is a new cache");
        assert!(!chunks(&conf_dir).is_empty());
        assert_eq!(chunks(&env_dir).len(), before);
        assert_eq!(configure(None, 0, 0), Status::Ok);
        assert_eq!(open_and_load("c4", "large.safetensors", LARGE), 0, "back to the environment's cache");
        std::env::remove_var("HOSTFIRST_REMOTE_CACHE");
        let _ = std::fs::remove_dir_all(&env_dir);
        let _ = std::fs::remove_dir_all(&conf_dir);
    });
}

#[test]
fn configured_retries_win_over_the_environment() {
    alone_remote(concat!(module_path!(), "::configured_retries_win_over_the_environment"), || {
        let u = url("down", "small.safetensors");
        // HOSTFIRST_REMOTE_RETRIES=2 (set by server()): the first try and two retries.
        assert_eq!(open(&u).unwrap_err(), Status::Io);
        assert_eq!(stats("down").0, 3);
        assert_eq!(configure(None, -1, 0), Status::Ok, "{}", last_error());
        assert_eq!(open(&u).unwrap_err(), Status::Io);
        assert_eq!(stats("down").0, 4, "max_retries = -1: one try, no retries");
        assert_eq!(configure(None, 1, 0), Status::Ok);
        assert_eq!(open(&u).unwrap_err(), Status::Io);
        assert_eq!(stats("down").0, 6, "max_retries = 1");
        assert_eq!(hostfirst_remote_configure(std::ptr::null()), Status::Ok);
        assert_eq!(open(&u).unwrap_err(), Status::Io);
        assert_eq!(stats("down").0, 9, "NULL: back to the environment");
    });
}

#[test]
fn remote_options_are_checked() {
    assert_eq!(hostfirst_remote_options_init(std::ptr::null_mut(), 48), Status::NullArgument);
    let mut o: hostfirst_remote_options = unsafe { std::mem::zeroed() };
    assert_eq!(hostfirst_remote_options_init(&mut o, 8), Status::InvalidArgument);
    assert_eq!(hostfirst_remote_options_init(&mut o, std::mem::size_of::<hostfirst_remote_options>()), Status::Ok);
    o.max_retries = -2;
    assert_eq!(hostfirst_remote_configure(&o), Status::InvalidArgument);
    assert!(last_error().contains("max_retries is -2"), "{}", last_error());
    o.max_retries = 101;
    assert_eq!(hostfirst_remote_configure(&o), Status::InvalidArgument);
    o.max_retries = 0;
    o.max_concurrency = 5000;
    assert_eq!(hostfirst_remote_configure(&o), Status::InvalidArgument);
    assert!(last_error().contains("max_concurrency is 5000"), "{}", last_error());
    o.max_concurrency = 0;
    // A cache folder that cannot be made (its parent is a file): IO naming it.
    let file = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("rcache-file-{}", std::process::id()));
    std::fs::write(&file, b"x").unwrap();
    let bad = CString::new(file.join("sub").to_str().unwrap()).unwrap();
    o.cache_dir = bad.as_ptr();
    assert_eq!(hostfirst_remote_configure(&o), Status::Io);
    assert!(last_error().contains("rcache-file-"), "{}", last_error());
    let _ = std::fs::remove_file(&file);
    assert_eq!(HOSTFIRST_REMOTE_OPTIONS_SIZE_1_0, std::mem::size_of::<hostfirst_remote_options>());
}

#[test]
fn a_large_read_is_cut_into_max_concurrency_requests() {
    alone_remote(concat!(module_path!(), "::a_large_read_is_cut_into_max_concurrency_requests"), || {
        // One 24 MiB tensor: more than twice the 8 MiB piece.
        std::fs::write(server().dir.join("huge.safetensors"), model(1, 24 << 20, 0)).unwrap();
        for (concurrency, requests) in [(1u32, 1u64), (2, 2), (3, 3), (16, 3)] {
            assert_eq!(configure(None, 0, concurrency), Status::Ok);
            let mode = format!("conc{concurrency}");
            let f = open(&url(&mode, "huge.safetensors")).unwrap();
            let (before, _) = stats(&mode);
            assert_eq!(copy(f, "t000").unwrap(), local("huge.safetensors", "t000"), "{concurrency}");
            let (after, _) = stats(&mode);
            assert_eq!(after - before, requests, "max_concurrency {concurrency}: at most 24 MiB / 8 MiB pieces");
            assert_eq!(hostfirst_file_free(f), Status::Ok);
        }
        assert_eq!(configure(None, 0, 0), Status::Ok);
        let _ = std::fs::remove_file(server().dir.join("huge.safetensors"));
    });
}
