//! examples-c/mpi_shard.c under OpenMPI: 4 ranks on one machine each load only their shards of every tensor
//! of a sharded set; rank 0 verifies every shard of every rank against the whole file (MPI_Gather of
//! checksums). The library never links MPI: the example does. scripts/test.sh installs OpenMPI (Debian's
//! openmpi-bin, libopenmpi-dev).

use crate::common::*;
use std::process::Command;

fn have(tool: &str) -> bool {
    Command::new(tool).arg("--version").output().map(|o| o.status.success()).unwrap_or(false)
}

/// Builds the example with the C compiler and the flags `mpicc` would add (the same warnings as every C test).
fn build() -> std::path::PathBuf {
    build_example("mpi_shard")
}

fn build_example(name: &str) -> std::path::PathBuf {
    let showme = |what: &str| {
        let o = Command::new("mpicc").arg(format!("--showme:{what}")).output().expect("run mpicc");
        assert!(o.status.success(), "mpicc --showme:{what}: {}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8(o.stdout).unwrap().split_whitespace().map(str::to_string).collect::<Vec<_>>()
    };
    // The MPI libraries come before the source on the command line: keep them even where --as-needed is the
    // default.
    let mut flags = vec!["-Wl,--no-as-needed".to_string()];
    flags.extend(showme("compile"));
    flags.extend(showme("link"));
    let refs: Vec<&str> = flags.iter().map(String::as_str).collect();
    compile_c(&[&root().join(format!("examples-c/{name}.c"))], name, &refs)
}

/// One mpirun at a time from this test binary: ranks busy-poll, and two oversubscribed jobs on 2 cores slow each
/// other's start-up for nothing.
static MPIRUN: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn mpirun(bin: &std::path::Path, np: &str, args: &[&str]) -> std::process::Output {
    let _one = MPIRUN.lock().unwrap_or_else(|e| e.into_inner());
    let mut cmd = Command::new("mpirun");
    // Root in CI containers; more ranks than the 2 cores; no network but loopback.
    cmd.args(["--allow-run-as-root", "--oversubscribe", "-np", np, "--mca", "btl", "self,vader"])
        .arg(bin)
        .args(args)
        .env("OMPI_MCA_plm_rsh_agent", "")
        // OpenMPI's session folder holds Unix sockets, whose paths are limited to 107 bytes: under /tmp, not
        // under the test run's TMPDIR (scripts/test.sh), which lies wherever the checkout does.
        .env("TMPDIR", "/tmp")
        .env_remove("HOSTFIRST_PLATFORMS");
    cmd.output().expect("run mpirun")
}

#[test]
fn four_ranks_load_their_shards_and_rank0_verifies() {
    assert!(
        have("mpicc") && have("mpirun"),
        "OpenMPI is missing: apt-get install openmpi-bin libopenmpi-dev (scripts/test.sh does)"
    );
    let bin = build();
    let dir = scratch(&format!("mpi-{}", std::process::id()));
    let index = dir.join("model.safetensors.index.json");
    let _ = std::fs::remove_file(&index);
    // Results come through per-rank report files, not mpirun's stdout (which MPI writes to as well).
    let reports = |np: usize| -> Vec<String> {
        (0..np).map(|r| std::fs::read_to_string(dir.join(format!("report-{r}.txt"))).unwrap_or_default()).collect()
    };
    let clear = || {
        for r in 0..8 {
            let _ = std::fs::remove_file(dir.join(format!("report-{r}.txt")));
        }
    };
    clear();
    let out = mpirun(&bin, "4", &[index.to_str().unwrap(), "cpu", dir.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "mpirun failed ({}):\n{stdout}\n{stderr}", out.status);
    let r = reports(4);
    assert!(r[0].contains("wrote a demo set"), "{r:?}");
    for (rank, text) in r.iter().enumerate() {
        assert!(text.contains(&format!("rank {rank} on cpu: 6 shards")), "{r:?}");
    }
    assert!(r[0].contains("6 tensors x 4 ranks verified: every checksum matches"), "{r:?}");
    // The set now exists: a second run (2 ranks) reads it as it is.
    clear();
    let out = mpirun(&bin, "2", &[index.to_str().unwrap(), "cpu", dir.to_str().unwrap()]);
    let r = reports(2);
    assert!(
        out.status.success() && !r[0].contains("wrote a demo set"),
        "{r:?} ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(r[0].contains("6 tensors x 2 ranks verified: every checksum matches"), "{r:?}");
    // 5 ranks cannot split the 512 embedding rows evenly: every rank's plan fails with INVALID_ARGUMENT
    // naming the tensor, and the job fails.
    let out = mpirun(&bin, "5", &[index.to_str().unwrap()]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("INVALID_ARGUMENT") && stderr.contains("'embed.weight'"), "{stderr}");
}

/// examples-c/mpi_save.c: the reverse. 4 ranks load their shards, then save them together into part files:
/// each rank writes only its own shards' bytes (replicated tensors: rank 0), the ranks' bytes add up to the
/// files' bytes exactly, and the saved set reads back equal to the original. Then a save where two ranks give
/// the same piece is refused by all ranks, leaving the saved set as it was.
#[test]
fn four_ranks_save_their_shards_together_and_nothing_twice() {
    assert!(have("mpicc") && have("mpirun"), "OpenMPI is missing (scripts/test.sh installs it)");
    let shard = build();
    let save = build_example("mpi_save");
    let dir = scratch(&format!("mpi-save-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let index = dir.join("model.safetensors.index.json");
    let out = mpirun(&shard, "2", &[index.to_str().unwrap()]); // writes the demo set
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let saved = dir.join("saved.safetensors");
    // Results come through per-rank report files (the program's fourth argument), not mpirun's stdout.
    let reports = |name: &str| -> std::path::PathBuf {
        let r = dir.join(name);
        let _ = std::fs::remove_dir_all(&r);
        std::fs::create_dir_all(&r).unwrap();
        r
    };
    let read_reports = |r: &std::path::Path| -> String {
        (0..4).map(|k| std::fs::read_to_string(r.join(format!("report-{k}.txt"))).unwrap_or_default()).collect()
    };
    let once_dir = reports("reports-once");
    let out =
        mpirun(&save, "4", &[index.to_str().unwrap(), saved.to_str().unwrap(), "once", once_dir.to_str().unwrap()]);
    let said = read_reports(&once_dir);
    assert!(out.status.success(), "mpirun failed ({}):\n{said}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    for r in 1..4 {
        let line = said.lines().find(|l| l.starts_with(&format!("rank {r}: wrote "))).expect("each rank reports");
        assert!(!line.contains("wrote 0 bytes"), "rank {r} wrote its shards: {line}");
    }
    assert!(said.contains("nothing twice") && said.contains("every tensor matches"), "{said}");
    let set = dir.join("saved.safetensors.index.json");
    let parts: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("saved-"))
        .collect();
    assert!(parts.len() >= 2, "{parts:?}");
    assert!(!std::fs::read_dir(&dir).unwrap().any(|e| e
        .unwrap()
        .file_name()
        .to_string_lossy()
        .ends_with(".hostfirst-tmp")));
    let f = hostfirst::file::TensorFile::open(&set).unwrap();
    assert_eq!(f.len(), 6);
    // Every rank gives the replicated tensors too: refused everywhere, the saved set unchanged.
    let before: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("saved"))
        .map(|p| (p.display().to_string(), std::fs::read(&p).unwrap()))
        .collect();
    let twice_dir = reports("reports-twice");
    let out =
        mpirun(&save, "4", &[index.to_str().unwrap(), saved.to_str().unwrap(), "twice", twice_dir.to_str().unwrap()]);
    let said = read_reports(&twice_dir);
    assert!(out.status.success(), "{said}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(said.contains("rank 0: refused: INVALID_ARGUMENT") && said.contains("written twice"), "{said}");
    assert!(said.contains("rank 3: refused: CANCELLED"), "{said}");
    for (p, bytes) in before {
        assert_eq!(std::fs::read(&p).unwrap(), bytes, "{p} changed");
    }
    assert!(!std::fs::read_dir(&dir).unwrap().any(|e| e
        .unwrap()
        .file_name()
        .to_string_lossy()
        .ends_with(".hostfirst-tmp")));
}

/// Token files (issue 35) under 4 ranks: a .npy file (int32 [64, 24], split by rows), an llm.c shard, a Megatron
/// dataset (its tokens split, its index's tensors replicated) and a headerless raw file past a 16-byte prefix
/// (`U16@16`). Each rank reads exactly its quarter of the tokens (bytes read = the bytes of its shard, at its
/// start) and rank 0 verifies every rank's checksums against the whole file. Results come from the report files.
#[test]
fn four_ranks_shard_token_files_reading_only_their_bytes() {
    use crate::tokens::{llmc, npy};
    use hostfirst::file::formats::megatron::write_index;
    assert!(
        have("mpicc") && have("mpirun"),
        "OpenMPI is missing: apt-get install openmpi-bin libopenmpi-dev (scripts/test.sh does)"
    );
    let bin = build();
    let dir = scratch(&format!("mpi-tokens-{}", std::process::id()));
    let toks = |n: u64| -> Vec<u8> { (0..n).flat_map(|i| ((i * 7919 + 13) as u16).to_le_bytes()).collect() };
    let ints: Vec<u8> = (0..64 * 24).flat_map(|i: i32| (i * 31 - 700).to_le_bytes()).collect();
    std::fs::write(dir.join("tokens.npy"), npy(1, "<i4", &[64, 24], false, &ints)).unwrap();
    std::fs::write(dir.join("shard.bin"), llmc(20240520, 1, 4000, &toks(4000))).unwrap();
    let lengths = [5i32, 0, 17, 33, 9, 16, 40]; // 120 tokens
    std::fs::write(dir.join("corpus.idx"), write_index(8, &lengths, &[0, 3, 7], None)).unwrap();
    std::fs::write(dir.join("corpus.bin"), toks(120)).unwrap();
    std::fs::write(dir.join("train.bin"), [b"sixteen byte hdr".to_vec(), toks(1000)].concat()).unwrap();
    let reports = |np: usize| -> Vec<String> {
        (0..np)
            .map(|r| {
                let p = dir.join(format!("report-{r}.txt"));
                let text = std::fs::read_to_string(&p).unwrap_or_default();
                let _ = std::fs::remove_file(&p);
                text
            })
            .collect()
    };
    let d = dir.to_str().unwrap();
    // (file, raw layout, format, tensors, the split tensor's name, its bytes, elements of its dimension 0)
    let cases: [(&str, &str, &str, usize, &str, u64, u64); 4] = [
        ("tokens.npy", "", "NPY", 1, "data", 64 * 24 * 4, 64),
        ("shard.bin", "", "LLMC", 1, "tokens", 8000, 4000),
        ("corpus.idx", "", "MEGATRON", 4, "tokens", 240, 120),
        ("train.bin", "U16@16", "RAW", 1, "tokens", 2000, 1000),
    ];
    for (file, raw, format, tensors, split, bytes, rows) in cases {
        reports(4);
        let path = dir.join(file);
        let mut args = vec![path.to_str().unwrap(), "cpu", d];
        if !raw.is_empty() {
            args.push(raw);
        }
        let out = mpirun(&bin, "4", &args);
        let r = reports(4);
        assert!(
            out.status.success(),
            "{file}: mpirun failed ({}): {r:?}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(r[0].starts_with(&format!("format {format}\n")), "{file}: {r:?}");
        assert!(
            r[0].contains(&format!("{tensors} tensors x 4 ranks verified: every checksum matches")),
            "{file}: {r:?}"
        );
        for (rank, text) in r.iter().enumerate() {
            let rank = rank as u64;
            // Its quarter of the split tensor, and nothing more read for it.
            let (part, start) = (bytes / 4, rank * rows / 4);
            let line = format!("shard {split}: start {start}, {part} bytes, {part} bytes read\n");
            assert!(text.contains(&line), "{file} rank {rank}: no '{line}' in {text:?}");
            // The replicated tensors (Megatron's index) whole, read once; the totals are those lines' sums.
            let (mut nbytes, mut read) = (0u64, 0u64);
            for l in text.lines().filter(|l| l.starts_with("shard ")) {
                let nums: Vec<u64> = l
                    .split(|c: char| !c.is_ascii_digit())
                    .filter(|w| !w.is_empty())
                    .map(|w| w.parse().unwrap())
                    .collect();
                let (b, rd) = (nums[nums.len() - 2], nums[nums.len() - 1]);
                assert_eq!(b, rd, "{file} rank {rank}: {l}");
                nbytes += b;
                read += rd;
            }
            let total = format!("rank {rank} on cpu: {tensors} shards, {nbytes} bytes, {read} bytes read\n");
            assert!(text.contains(&total), "{file}: no '{total}' in {text:?}");
        }
        if format == "MEGATRON" {
            assert!(r[1].contains("shard sequence_lengths: start 0, 28 bytes, 28 bytes read"), "{r:?}");
            assert!(r[3].contains("shard document_indices: start 0, 24 bytes, 24 bytes read"), "{r:?}");
        }
    }
    // 3 ranks cannot split 4000 tokens evenly: a rank's plan fails with INVALID_ARGUMENT naming the tensor (in its
    // report, written before it aborts the job), and the job fails.
    reports(3);
    let out = mpirun(&bin, "3", &[dir.join("shard.bin").to_str().unwrap(), "cpu", d]);
    assert!(!out.status.success());
    let r = reports(3);
    assert!(
        r.iter().any(|t| t.contains("error: hostfirst_shard_plan_make")
            && t.contains("INVALID_ARGUMENT")
            && t.contains("'tokens'")),
        "{r:?}"
    );
}
