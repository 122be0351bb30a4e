#!/usr/bin/env bash
# Builds the fuzz targets with AddressSanitizer and libFuzzer on the stable toolchain, runs them, and appends
# each run to the record (fuzz/record.tsv, summarised in fuzz/README.md).
#
#   bash fuzz/run.sh build                      build every target (ASan + coverage), nothing else
#   bash fuzz/run.sh run TARGET RUNS [ARGS...]  run TARGET for RUNS executions (libFuzzer -runs=RUNS), then record
#   bash fuzz/run.sh time TARGET SECONDS [...]  run TARGET for SECONDS (-max_total_time), then record
#   bash fuzz/run.sh all RUNS                   every target in turn, RUNS executions each (never two at once)
#   bash fuzz/run.sh summary                    executions per target summed over the record
#   bash fuzz/run.sh list                       the targets
#
# Every run builds first (a no-op when current). One fuzzer process at a time, under `nice -n 19` (a shared
# 2-core machine). The working corpus of TARGET is fuzz/corpus/TARGET (git-ignored; seeded on every run from
# its committed folders under tests/corpus/, see seed_dirs), crashes go to fuzz/artifacts/TARGET/, the full
# libFuzzer output to fuzz/logs/. A crash stops the run: minimise it (`$BIN -minimize_crash=1 -runs=100000
# CRASH`), fix it, and keep it in tests/corpus/ as fuzz/README.md says, where `cargo test` replays it.
#
# The build is cargo-fuzz's (`cargo fuzz build -O --debug-assertions`) without needing cargo-fuzz: sancov
# instrumentation, `--cfg fuzzing`, -Zsanitizer=address (RUSTC_BOOTSTRAP=1 lets the stable compiler take -Z
# flags), and an explicit --target so build scripts and proc macros stay uninstrumented.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
triple="$(rustc -vV | sed -n 's/^host: //p')"
target_dir="$here/target/asan"
bin_dir="$target_dir/$triple/release"
record="$here/record.tsv"

targets() { sed -n 's/^name = "\(.*\)"$/\1/p' "$here/Cargo.toml" | grep -v '^hostfirst-fuzz$'; }

build() {
    (
        cd "$here"
        export RUSTC_BOOTSTRAP=1
        export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing -Zsanitizer=address"
        nice -n 19 cargo build --release --locked --target "$triple" --target-dir "$target_dir" --bins
    )
    # The commit the binaries were built from (with +dirty for uncommitted changes), for the record.
    local commit
    commit="$(git -C "$root" rev-parse --short HEAD)"
    # (The record itself, which every run appends to, does not count.)
    git -C "$root" diff --quiet HEAD -- . ':!fuzz/record.tsv' 2>/dev/null || commit="$commit+dirty"
    echo "$commit" >"$target_dir/built-from"
}

# Per-target libFuzzer options: the longest input worth trying.
max_len() {
    case "$1" in
        open_memory | open_file) echo 8192 ;;
        index_set) echo 4096 ;;
        *) echo 1024 ;;
    esac
}

# The committed corpus folders (tests/corpus/*) a target starts from: its own (fuzz/harness/mod.rs, TARGETS) and,
# for the file targets, the safetensors catalogue.
seed_dirs() {
    case "$1" in
        open_memory) echo safetensors ;;
        open_file) echo "open_file safetensors" ;;
        open_npy | open_llmc | open_megatron | open_raw) echo tokens ;;
        *) echo "$1" ;;
    esac
}

fuzz() { # mode(run|time) target amount [extra libFuzzer args]
    local mode="$1" t="$2" amount="$3"
    shift 3
    targets | grep -qx "$t" || { echo "run.sh: unknown target '$t' (bash fuzz/run.sh list)" >&2; exit 2; }
    local bin="$bin_dir/$t"
    [ "${FUZZ_NO_BUILD:-}" = 1 ] && [ -x "$bin" ] || build
    local work="$here/corpus/$t" art="$here/artifacts/$t/" logs="$here/logs"
    mkdir -p "$work" "$art" "$logs"
    # The committed seeds (and every past crash) join the working corpus.
    local d
    for d in $(seed_dirs "$t"); do
        [ -d "$root/tests/corpus/$d" ] && find "$root/tests/corpus/$d" -maxdepth 1 -type f -exec cp -n {} "$work/" \;
    done
    local dict=()
    [ -f "$here/dict/$t.dict" ] && dict=("-dict=$here/dict/$t.dict")
    local limit
    if [ "$mode" = run ]; then limit="-runs=$amount"; else limit="-max_total_time=$amount"; fi
    local stamp log start end rc
    stamp="$(date -u +%Y%m%dT%H%M%SZ)"
    log="$logs/$t-$stamp.log"
    echo "run.sh: $t $limit, log $log" >&2
    start=$(date +%s)
    set +e
    # The file targets write a file or two per execution under $TMPDIR: a tmpfs keeps that off the disk (4x
    # faster here). detect_leaks: every run also checks for leaks; ASan aborts on the first error.
    local tmp="${TMPDIR:-/tmp}"
    [ -z "${TMPDIR:-}" ] && [ -d /dev/shm ] && [ -w /dev/shm ] && tmp=/dev/shm
    TMPDIR="$tmp" ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:symbolize=1}" \
        nice -n 19 "$bin" "$limit" -max_len="$(max_len "$t")" -timeout=30 -rss_limit_mb=4096 \
        -print_final_stats=1 -artifact_prefix="$art" "${dict[@]}" "$@" "$work" >"$log" 2>&1
    rc=$?
    set -e
    end=$(date +%s)
    local execs
    execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)"
    [ -n "$execs" ] || execs=0
    local result=ok
    if [ "$rc" -ne 0 ]; then result="crash(rc=$rc)"; fi
    # Stopped by SIGINT/SIGTERM (libFuzzer says so and prints its stats): not a crash, the executions count.
    if [ "$rc" -ne 0 ] && grep -q "libFuzzer: run interrupted" "$log"; then result=interrupted; fi
    local commit
    commit="$(cat "$target_dir/built-from" 2>/dev/null || echo unknown)"
    local corpus_n
    corpus_n="$(find "$work" -maxdepth 1 -type f | wc -l)"
    [ -f "$record" ] || printf 'date_utc\ttarget\texecutions\tseconds\tresult\tcorpus_files\tcommit\tsanitizer\n' >"$record"
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$stamp" "$t" "$execs" "$((end - start))" "$result" "$corpus_n" \
        "$commit" "address" >>"$record"
    tail -n 12 "$log" >&2
    echo "run.sh: $t: $execs executions in $((end - start)) s, $result" >&2
    [ "$rc" -eq 0 ]
}

summary() {
    [ -f "$record" ] || { echo "no record yet"; return; }
    echo "| target | executions under ASan | runs | seconds | dates (UTC) | working corpus | committed corpus | runs ended by a crash |"
    echo "|---|---:|---:|---:|---|---:|---:|---:|"
    local t
    for t in $(targets); do
        local committed=0 d
        for d in $(seed_dirs "$t"); do
            committed=$((committed + $(find "$root/tests/corpus/$d" -maxdepth 1 -name '*.bin' 2>/dev/null | wc -l)))
        done
        awk -F'\t' -v t="$t" -v c="$committed" 'NR > 1 && $2 == t {
                n += $3; s += $4; r++; if ($5 != "ok" && $5 != "interrupted") x++; day = substr($1, 1, 4) "-" substr($1, 5, 2) "-" substr($1, 7, 2);
                if (first == "") first = day; last = day; corpus = $6 }
            END { if (r) printf "| %s | %d | %d | %d | %s | %d | %d | %d |\n", t, n, r, s,
                      (first == last ? first : first " to " last), corpus, c, x
                  else printf "| %s | 0 | 0 | 0 | - | - | %d | 0 |\n", t, c }' "$record"
    done
}

cmd="${1:-}"
case "$cmd" in
    build) build ;;
    run | time)
        [ $# -ge 3 ] || { echo "usage: $0 $cmd TARGET AMOUNT [libFuzzer args]" >&2; exit 2; }
        fuzz "$@"
        ;;
    all)
        [ $# -ge 2 ] || { echo "usage: $0 all RUNS" >&2; exit 2; }
        build
        for t in $(targets); do fuzz run "$t" "$2"; done
        ;;
    summary) summary ;;
    list) targets ;;
    *)
        sed -n '2,10p' "$0" >&2
        exit 2
        ;;
esac
