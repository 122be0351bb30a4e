//! The safetensors writer through the C API (tests/c/test_writer.c): byte equality with the `safetensors`
//! crate's serializer for a file written from C, every declaration kind and bad input, the crash test
//! (SIGKILL at every kill point of a save, and at random times), a full file system (a small tmpfs the test
//! mounts), permission errors, and CUDA buffers as sources on the stand-in driver (both modes: the deferred
//! pass of scripts/test.sh runs the `cuda` tests again).

use crate::common::*;
use hostfirst::file::TensorFile;
use std::path::{Path, PathBuf};
use std::process::Command;

fn bin() -> PathBuf {
    assert!(have_cc(), "no C compiler ('{}')", cc());
    compile_c_test("test_writer")
}

pub(crate) fn fresh(name: &str) -> PathBuf {
    let d = scratch(&format!("writer-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The byte pattern the C program gives tensor `k`.
fn fill(n: usize, k: u32) -> Vec<u8> {
    (0..n).map(|j| ((j as u64 * 31 + k as u64) & 0xff) as u8).collect()
}

/// What `test_writer api DIR` must leave in `DIR/api.safetensors`: the same tensors and metadata serialized by
/// the `safetensors` crate (windows.rs compares the Windows program's file with it too).
pub(crate) fn api_expected() -> Vec<u8> {
    // The tensors the C program declares, rebuilt here and serialized by the crate.
    let mut owned: Vec<(String, safetensors::Dtype, Vec<usize>, Vec<u8>)> = Vec::new();
    for d in hostfirst::dtype::ALL_DTYPES {
        let cols = if d.bits() % 8 != 0 { 8 } else { 3 };
        let n = 4 * cols * d.bits() as usize / 8;
        owned.push((format!("t{:02}.{}", *d as u32, d.name()), d.to_safetensors(), vec![4, cols], fill(n, *d as u32)));
    }
    owned.push(("scalar".into(), safetensors::Dtype::F64, vec![], 2.5f64.to_le_bytes().to_vec()));
    owned.push(("empty".into(), safetensors::Dtype::I32, vec![0, 5], vec![]));
    owned.push(("pieces".into(), safetensors::Dtype::F32, vec![4, 6], fill(96, 99)));
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = owned
        .iter()
        .map(|(n, d, s, b)| (n.clone(), safetensors::tensor::TensorView::new(*d, s.clone(), b).unwrap()))
        .collect();
    let meta = std::collections::HashMap::from([("format".to_string(), "pt".to_string())]);
    safetensors::serialize(views, Some(meta)).unwrap()
}

/// Every declaration kind and bad input from C; the file it writes first is byte for byte what the crate's
/// serializer writes for the same tensors and metadata.
#[test]
fn c_writer_api_and_byte_equality_with_the_crate() {
    let dir = fresh("api");
    run_ok(&bin(), &["api", dir.to_str().unwrap()], &[]);
    let want = api_expected();
    let got = std::fs::read(dir.join("api.safetensors")).unwrap();
    assert_eq!(got.len(), want.len());
    assert!(got == want, "the C writer's file differs from the safetensors crate's serializer");
    // And the crate reads it back.
    let st = safetensors::SafeTensors::deserialize(&got).unwrap();
    assert_eq!(st.tensor("pieces").unwrap().data(), &fill(96, 99)[..]);
}

// ---- the crash test ----------------------------------------------------------------------------------------

/// What a save of generation `g` puts in tensor `w{k}` (tests/c/test_writer.c, mode gen).
fn gen_bytes(n: usize, k: u32, g: u32) -> Vec<u8> {
    fill(n, k * 13 + g * 101)
}

/// The generation the save at `path` (a file, or a set's index) holds, after checking that every tensor is
/// complete and of that generation. Panics on anything else: a half-written or mixed file.
pub(crate) fn generation_of(path: &Path, mib: usize) -> u32 {
    let f = TensorFile::open(path).unwrap_or_else(|e| panic!("{} does not open: {e}", path.display()));
    let g: u32 = f.metadata("generation").expect("a generation").parse().unwrap();
    assert_eq!(f.len(), 4, "{}", path.display());
    for k in 0..4u32 {
        let v = f.view(&format!("w{k}")).unwrap();
        let got = v.to_vec().unwrap();
        assert!(got == gen_bytes(mib << 18, k, g), "{}: tensor w{k} is not all of generation {g}", path.display());
    }
    g
}

/// The staged files (`.*.hostfirst-tmp`) in `dir`.
pub(crate) fn staged(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.') && n.ends_with(".hostfirst-tmp"))
        .collect()
}

fn killed(out: &std::process::Output) -> bool {
    use std::os::unix::process::ExitStatusExt;
    out.status.signal() == Some(9)
}

/// One crash scenario: a save of generation `g` over a target holding `old`, killed at point `k` (0: never).
/// Returns the generation the target holds afterwards, and whether the save was killed.
fn one_kill(bin: &Path, path: &Path, g: u32, k: usize, mib: usize, split: u64, no_sync: bool) -> (u32, bool) {
    let (gs, ms, ss) = (g.to_string(), mib.to_string(), split.to_string());
    let args = ["gen", path.to_str().unwrap(), &gs, &ms, &ss, if no_sync { "1" } else { "0" }];
    let at = k.to_string();
    let out = run(bin, &args, &[("HOSTFIRST_WRITER_KILL_AT", Some(&at))]);
    let was_killed = killed(&out);
    assert!(
        was_killed || out.status.success(),
        "the writer failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    (generation_of(path, mib), was_killed)
}

/// Every kill point of a save, one process each: the target (a file, or a set) is always the old save or the
/// complete new one; a killed save leaves at most its staged files, and the next save removes them.
fn kill_at_every_point(name: &str, split: u64, no_sync: bool) {
    let bin = bin();
    let dir = fresh(name);
    let mib = 2;
    let target = dir.join(if split > 0 { "model.safetensors.index.json" } else { "model.safetensors" });
    let (mut current, _) = one_kill(&bin, &target, 0, 0, mib, split, no_sync);
    let limit = if under_valgrind() { 3 } else { 200 };
    let mut points = 0;
    for k in 1..=limit {
        let g = k as u32;
        let (now, was_killed) = one_kill(&bin, &target, g, k, mib, split, no_sync);
        assert!(
            now == current || now == g,
            "kill point {k}: the target holds generation {now}, neither {current} nor {g}"
        );
        current = now;
        if !was_killed {
            points = k - 1;
            break;
        }
        // At most each file's staged file (for a set: each part's, with its second name, and the index's).
        let most = if split > 0 { 5 } else { 1 };
        assert!(staged(&dir).len() <= most, "kill point {k}: {:?}", staged(&dir));
    }
    assert!(under_valgrind() || points >= 8, "only {points} kill points: the save was not killed mid-way");
    // The next save completes and removes what the killed ones left.
    let (now, _) = one_kill(&bin, &target, 9999, 0, mib, split, no_sync);
    assert_eq!(now, 9999);
    assert_eq!(staged(&dir), Vec::<String>::new());
}

#[test]
fn crash_kill_points_single_file() {
    kill_at_every_point("kill-single", 0, false);
}

#[test]
fn crash_kill_points_single_file_no_sync() {
    kill_at_every_point("kill-nosync", 0, true);
}

#[test]
fn crash_kill_points_part_files() {
    kill_at_every_point("kill-split", 1 << 20, false);
}

/// SIGKILL at random times while a larger save runs: the same invariant (whatever the timing, the target is
/// the old save or the new one; the timing only decides which).
#[test]
fn crash_sigkill_at_random_times() {
    let bin = bin();
    let dir = fresh("kill-random");
    let target = dir.join("model.safetensors");
    let mib = 16;
    let (mut current, _) = one_kill(&bin, &target, 0, 0, mib, 0, false);
    let mut seed = std::process::id() as u64 | 1;
    let rounds = if under_valgrind() { 2 } else { 10 };
    for round in 1..=rounds {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let delay = std::time::Duration::from_millis(seed % 400);
        let g = 100 + round;
        let mut child = Command::new(&bin)
            .args(["gen", target.to_str().unwrap(), &g.to_string(), &mib.to_string(), "0", "0"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(delay);
        let _ = child.kill();
        let _ = child.wait();
        let now = generation_of(&target, mib);
        assert!(now == current || now == g, "round {round}: generation {now}, neither {current} nor {g}");
        current = now;
        assert!(staged(&dir).len() <= 1, "{:?}", staged(&dir));
    }
    one_kill(&bin, &target, 7777, 0, mib, 0, true);
    assert_eq!(staged(&dir), Vec::<String>::new());
}

// ---- refused saves: a full file system, no permission -------------------------------------------------------

/// A tmpfs of `size` mounted at a fresh directory for the test's lifetime; `None` (with the reason) when this
/// process cannot mount.
pub(crate) struct Mount(pub(crate) PathBuf);

impl Mount {
    pub(crate) fn tmpfs(name: &str, opts: &str) -> Result<Mount, String> {
        let dir = fresh(name);
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", opts, "tmpfs"])
            .arg(&dir)
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !out.status.success() {
            return Err(format!("mount -t tmpfs -o {opts} failed: {}", String::from_utf8_lossy(&out.stderr).trim()));
        }
        Ok(Mount(dir))
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).output();
    }
}

/// ENOSPC: a 4 MiB save onto a 1 MiB tmpfs fails with NO_SPACE naming the numbers, the old file stays, no
/// staged file is left. Skipped (saying why) only where this process cannot mount a file system.
#[test]
fn nospace_on_a_small_tmpfs() {
    let m = match Mount::tmpfs("nospace", "size=1m") {
        Ok(m) => m,
        Err(why) => {
            eprintln!("SKIPPED: nospace_on_a_small_tmpfs needs a small file system and cannot make one: {why}");
            return;
        }
    };
    let target = m.0.join("model.safetensors");
    std::fs::write(&target, b"the old, small file").unwrap();
    let out = run_ok(&bin(), &["refused", target.to_str().unwrap(), "NO_SPACE"], &[]);
    assert!(out.contains("needs 4194") && out.contains("bytes free"), "{out}");
    assert_eq!(std::fs::read(&target).unwrap(), b"the old, small file");
    // A new target on the full file system: nothing is created.
    let fresh_target = m.0.join("new.safetensors");
    run_ok(&bin(), &["refused", fresh_target.to_str().unwrap(), "NO_SPACE"], &[]);
    assert!(!fresh_target.exists());
}

/// A read-only file system: PERMISSION_DENIED, the target unchanged.
#[test]
fn read_only_file_system_is_permission_denied() {
    let m = match Mount::tmpfs("rofs", "size=1m") {
        Ok(m) => m,
        Err(why) => {
            eprintln!("SKIPPED: read_only_file_system_is_permission_denied cannot mount a file system: {why}");
            return;
        }
    };
    let target = m.0.join("model.safetensors");
    std::fs::write(&target, b"old").unwrap();
    let out = Command::new("mount").args(["-o", "remount,ro"]).arg(&m.0).output().unwrap();
    assert!(out.status.success(), "remount ro: {}", String::from_utf8_lossy(&out.stderr));
    run_ok(&bin(), &["refused", target.to_str().unwrap(), "PERMISSION_DENIED"], &[]);
    assert_eq!(std::fs::read(&target).unwrap(), b"old");
}

/// A directory the process may not write: PERMISSION_DENIED, nothing created. As root (which writes anywhere)
/// the program runs as the unprivileged user 65534.
#[test]
fn unwritable_directory_is_permission_denied() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let bin = bin();
    let dir = fresh("perm");
    let target = dir.join("model.safetensors");
    std::fs::write(&target, b"old").unwrap();
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let mut cmd = Command::new(&bin);
    cmd.args(["refused", target.to_str().unwrap(), "PERMISSION_DENIED"]);
    if root {
        cmd.uid(65534).gid(65534);
    } else {
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o555)).unwrap();
    }
    let out = cmd.output().unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    assert!(out.status.success(), "{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(std::fs::read(&target).unwrap(), b"old");
}

// ---- CUDA buffers as sources (the stand-in driver) ----------------------------------------------------------

#[test]
fn cuda_buffers_are_sources_on_the_stand_in() {
    let dir = fresh("cuda");
    run_ok_with_stand_in(&bin(), &["cuda", dir.to_str().unwrap()], &[]);
}

/// A device-to-host copy fails half-way through the first CUDA source (the stand-in's copy budget, set past
/// the bytes the puts copy): DEVICE_ERROR naming the driver's call, the old target unchanged, nothing left.
#[test]
fn cuda_copy_failure_leaves_the_target() {
    let dir = fresh("cuda-fail");
    // The puts copy 3 MiB + 1 KiB + 1 MiB + 2 MiB; the save then copies 1 KiB and fails 1.5 MiB into `big`.
    let budget = (6_292_480u64 + 1024 + 1_572_864).to_string();
    run_ok_with_stand_in(
        &bin(),
        &["cuda", dir.to_str().unwrap()],
        &[("STAND_IN_FAIL_COPY_AFTER", Some(&budget)), ("EXPECT", Some("DEVICE_ERROR"))],
    );
}

/// Issue 43, point 12: what is read can be written. A metadata value (and key) longer than 64 KiB, which the
/// reader takes, is accepted by `hostfirst_writer_set_metadata` and saved (it was INVALID_ARGUMENT: every string
/// parameter was capped at 64 KiB, so files written elsewhere could not be saved again).
#[test]
fn metadata_values_the_reader_takes_can_be_written() {
    use hostfirst::ffi::*;
    use hostfirst::Status;
    use std::ffi::CString;
    let dir = fresh("bigmeta");
    let path = CString::new(dir.join("m.safetensors").to_str().unwrap()).unwrap();
    let (key, value) = ("k".repeat(70_000), "v".repeat(3 << 20));
    let (k, v) = (CString::new(key.clone()).unwrap(), CString::new(value.clone()).unwrap());
    let mut w: *mut hostfirst_writer = std::ptr::null_mut();
    assert_eq!(hostfirst_writer_open(path.as_ptr(), std::ptr::null(), &mut w), Status::Ok);
    assert_eq!(
        hostfirst_writer_set_metadata(w, &k.as_ptr(), &v.as_ptr(), 1),
        Status::Ok,
        "{}",
        crate::file_support::last_error()
    );
    assert_eq!(hostfirst_writer_finish(w, std::ptr::null_mut()), Status::Ok, "{}", crate::file_support::last_error());
    assert_eq!(hostfirst_writer_free(w), Status::Ok);
    let f = TensorFile::open(dir.join("m.safetensors")).unwrap();
    assert!(f.metadata(&key) == Some(value.as_str()), "the value read back is the value written");
    // A string longer than any header the reader takes is refused, naming the cap.
    let huge = CString::new("v".repeat(100_000_001)).unwrap();
    assert_eq!(hostfirst_writer_open(path.as_ptr(), std::ptr::null(), &mut w), Status::Ok);
    assert_eq!(hostfirst_writer_set_metadata(w, &k.as_ptr(), &huge.as_ptr(), 1), Status::InvalidArgument);
    assert!(crate::file_support::last_error().contains("100000000"), "{}", crate::file_support::last_error());
    assert_eq!(hostfirst_writer_free(w), Status::Ok);
}

/// Issue 43, points 8 and 9, between processes (the C program, one process per save, all started at once): every
/// save of a split set, and of one file, returns OK, and what is on disk afterwards is entirely one of them
/// (`generation_of` panics on a mixed or incomplete set). Without the set lock this test fails (a set of two
/// saves' parts within the 20 rounds; the issue saw one in 9 to 11 of 20). The race of point 9 is narrower
/// between processes (it did not show in 2 runs without the fix here); the unit test
/// `racing_saves_of_one_file_all_succeed` (threads) catches it in half its runs.
#[test]
fn processes_racing_to_save_one_set_or_one_file_all_succeed_and_never_mix() {
    let bin = bin();
    let dir = fresh("race-processes");
    for (target, writers, rounds, split) in
        [("model.safetensors.index.json", 2u32, 20u32, 256u64 << 10), ("model.safetensors", 4, 25, 0)]
    {
        let target = dir.join(target);
        for round in 0..rounds {
            let children: Vec<(u32, std::process::Child)> = (0..writers)
                .map(|w| {
                    let g = 1000 * (round + 1) + w;
                    let child = Command::new(&bin)
                        .args(["gen", target.to_str().unwrap(), &g.to_string(), "1", &split.to_string(), "1"])
                        .stdout(std::process::Stdio::null())
                        .stderr(std::process::Stdio::piped())
                        .spawn()
                        .unwrap();
                    (g, child)
                })
                .collect();
            let gens: Vec<u32> = children
                .into_iter()
                .map(|(g, c)| {
                    let out = c.wait_with_output().unwrap();
                    assert!(
                        out.status.success(),
                        "{}: round {round}: the save of generation {g} failed:\n{}",
                        target.display(),
                        String::from_utf8_lossy(&out.stderr)
                    );
                    g
                })
                .collect();
            let now = generation_of(&target, 1);
            assert!(gens.contains(&now), "{}: round {round}: generation {now}, none of {gens:?}", target.display());
            assert_eq!(staged(&dir), Vec::<String>::new(), "round {round}");
        }
    }
}
