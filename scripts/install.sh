#!/usr/bin/env bash
# Builds hostfirst in release mode and installs it under a prefix, without cargo-c:
#
#   <prefix>/<libdir>/libhostfirst.so.X.Y.Z            the shared library (SONAME libhostfirst.so.<soversion>),
#                                                      stripped; symbols versioned HOSTFIRST_X.Y (abi/hostfirst.map)
#   <prefix>/<libdir>/libhostfirst.so.X.Y.Z.debug      its debug info (objcopy --only-keep-debug; the library
#                                                      names it in .gnu_debuglink, so gdb and abidiff find it)
#   <prefix>/<libdir>/libhostfirst.so.<soversion>      -> libhostfirst.so.X.Y.Z   (what the loader looks for)
#   <prefix>/<libdir>/libhostfirst.so                  -> libhostfirst.so.X.Y.Z   (what the linker looks for)
#   <prefix>/<libdir>/libhostfirst.a                   the static library (debug info stripped)
#   <prefix>/include/hostfirst.h                       (and every other include/*.h, include/*.hpp)
#   <prefix>/<libdir>/pkgconfig/hostfirst.pc
#   <prefix>/<libdir>/cmake/hostfirst/hostfirstConfig.cmake, hostfirstConfigVersion.cmake
#   <prefix>/bin/hostfirst                             the CLI (cli/, built by cli/build.sh), rpath $ORIGIN/../<libdir>
#   <prefix>/share/licenses/hostfirst/LICENSE-MIT, LICENSE-APACHE   the licence texts (MIT OR Apache-2.0)
#
# Usage: scripts/install.sh --prefix DIR [--libdir lib] [--destdir DIR] [--features LIST] [--no-cli]
#   --prefix DIR     where the files are meant to live (required)
#   --libdir DIR     library directory, relative to the prefix or absolute inside it (default: lib)
#   --destdir DIR    stage the files under DIR/<prefix> instead (for packagers); paths inside the files
#                    still name <prefix>
#   --features LIST  cargo features to build with (default: none)
#   --no-cli         do not build and install the hostfirst CLI (it needs a C compiler)
# Environment: CARGO (default cargo), RUSTC (default rustc), CC (default cc), OBJCOPY (default objcopy).
# See docs/PACKAGING.md.
set -euo pipefail

die() { echo "install.sh: $*" >&2; exit 1; }
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit "${1:-2}"; }

prefix="" libdir="lib" destdir="" features="" cli=1
while [ $# -gt 0 ]; do
    case "$1" in
        --prefix) [ $# -ge 2 ] || die "--prefix needs a value"; prefix="$2"; shift 2 ;;
        --prefix=*) prefix="${1#*=}"; shift ;;
        --libdir) [ $# -ge 2 ] || die "--libdir needs a value"; libdir="$2"; shift 2 ;;
        --libdir=*) libdir="${1#*=}"; shift ;;
        --destdir) [ $# -ge 2 ] || die "--destdir needs a value"; destdir="$2"; shift 2 ;;
        --destdir=*) destdir="${1#*=}"; shift ;;
        --features) [ $# -ge 2 ] || die "--features needs a value"; features="$2"; shift 2 ;;
        --features=*) features="${1#*=}"; shift ;;
        --no-cli) cli=0; shift ;;
        -h|--help) usage 0 ;;
        *) echo "install.sh: unknown argument '$1'" >&2; usage 2 ;;
    esac
done
[ -n "$prefix" ] || { echo "install.sh: --prefix is required" >&2; usage 2; }

# Absolute, normalised paths (relative ones are taken from the caller's directory).
abspath() { case "$1" in /*) printf '%s\n' "$1" ;; *) printf '%s/%s\n' "$PWD" "$1" ;; esac; }
normpath() {
    local out="" part
    local IFS=/
    for part in $1; do
        case "$part" in
            ""|.) ;;
            ..) out="${out%/*}" ;;
            *) out="$out/$part" ;;
        esac
    done
    printf '%s\n' "${out:-/}"
}
prefix="$(normpath "$(abspath "$prefix")")"
[ -z "$destdir" ] || destdir="$(normpath "$(abspath "$destdir")")"
case "$libdir" in
    /*)
        libdir="$(normpath "$libdir")"
        case "$libdir/" in
            "$prefix"/*) libdir="${libdir#"$prefix"/}" ;;
            *) die "--libdir $libdir is not inside the prefix $prefix (the CMake package computes paths from the prefix)" ;;
        esac ;;
esac
libdir="$(normpath "$libdir")"; libdir="${libdir#/}"
[ -n "$libdir" ] || die "--libdir must not be the prefix itself"
includedir="include"
cmakedir="$libdir/cmake/hostfirst"

cd "$(dirname "$0")/.."
root="$PWD"
cargo="${CARGO:-cargo}"
cc="${CC:-cc}"
objcopy="${OBJCOPY:-objcopy}"
command -v "$objcopy" >/dev/null 2>&1 || die "'$objcopy' not found (binutils): it splits the debug info off the library"
if [ "$cli" = 1 ] && ! command -v "$cc" >/dev/null 2>&1; then
    die "the hostfirst CLI needs a C compiler ('$cc' not found): install one, set CC, or pass --no-cli"
fi

case "$(uname -s)" in
    Linux|FreeBSD|DragonFly|NetBSD|OpenBSD|SunOS|GNU) ;;
    *) die "this script installs ELF shared libraries (Linux and the BSDs); on $(uname -s) use cargo cinstall (docs/PACKAGING.md)" ;;
esac

# --- version and SONAME (the policy of build.rs; the built library is checked against it below)
version="$(sed -n 's/^version *= *"\([^"]*\)".*/\1/p' Cargo.toml | head -n 1)"
description="$(sed -n 's/^description *= *"\(.*\)"$/\1/p' Cargo.toml | head -n 1)"
[ -n "$version" ] || die "no version in Cargo.toml"
base="${version%%[-+]*}"
IFS=. read -r v_major v_minor v_patch <<<"$base"
case "$v_major.$v_minor.$v_patch" in
    *[!0-9.]*|.*|*..*|*.) die "cannot parse version '$version'" ;;
esac
if [ "$v_major" -ge 1 ]; then soversion="$v_major"
elif [ "$v_minor" -ge 1 ]; then soversion="0.$v_minor"
else soversion="0.0.$v_patch"; fi
real="libhostfirst.so.$v_major.$v_minor.$v_patch"
soname="libhostfirst.so.$soversion"

# --- build (cargo replays the native-static-libs note when the build is already fresh)
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
build=("$cargo" rustc --release --lib)
[ -z "$features" ] || build+=(--features "$features")
echo "install.sh: building: ${build[*]}" >&2
if ! "${build[@]}" -- --print native-static-libs 2>"$log"; then
    cat "$log" >&2
    die "cargo build failed"
fi
native_static_libs="$(sed -n 's/^note: native-static-libs: *//p' "$log" | tail -n 1)"
[ -n "$native_static_libs" ] || { cat "$log" >&2; die "cargo did not report native-static-libs"; }

target_dir="$("$cargo" metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')"
[ -n "$target_dir" ] || die "cannot find cargo's target directory"
out="$target_dir/release"
for f in libhostfirst.so libhostfirst.a; do
    [ -f "$out/$f" ] || die "$out/$f was not built"
done
if command -v readelf >/dev/null 2>&1; then
    got="$(readelf -d "$out/libhostfirst.so" | sed -n 's/.*(SONAME).*\[\(.*\)\].*/\1/p')"
    [ "$got" = "$soname" ] || die "$out/libhostfirst.so has SONAME '$got', expected '$soname' (see build.rs)"
fi

pointer_width="$("${RUSTC:-rustc}" --print cfg | sed -n 's/^target_pointer_width="\([0-9]*\)"/\1/p')"
[ -n "$pointer_width" ] || pointer_width=64
sizeof_void_p=$((pointer_width / 8))

# --- templates: replace @KEY@ with values (sed replacement text escaped)
sed_escape() { printf '%s' "$1" | sed -e 's/[\\|&]/\\&/g'; }
render() { # render TEMPLATE OUTPUT KEY=VALUE...
    local template="$1" output="$2" args=() kv
    shift 2
    for kv in "$@"; do
        args+=(-e "s|@${kv%%=*}@|$(sed_escape "${kv#*=}")|g")
    done
    sed "${args[@]}" "$template" >"$output.tmp"
    if grep -q '@[A-Z_]*@' "$output.tmp"; then
        grep -n '@[A-Z_]*@' "$output.tmp" >&2
        rm -f "$output.tmp"
        die "unreplaced placeholder in $output"
    fi
    mv "$output.tmp" "$output"
}

# CMake wants library names (or flags) as a ;-list: -lpthread -> pthread.
cmake_static_libs=""
for tok in $native_static_libs; do
    case "$tok" in -l*) tok="${tok#-l}" ;; esac
    cmake_static_libs="${cmake_static_libs:+$cmake_static_libs;}$tok"
done
# <prefix>/<libdir>/cmake/hostfirst -> "../../.." (one .. per component)
up=""
IFS=/ read -r -a parts <<<"$cmakedir"
for _ in "${parts[@]}"; do up="${up:+$up/}.."; done

# --- install
dest_lib="$destdir$prefix/$libdir"
dest_inc="$destdir$prefix/$includedir"
dest_pc="$dest_lib/pkgconfig"
dest_cmake="$destdir$prefix/$cmakedir"
mkdir -p "$dest_lib" "$dest_inc" "$dest_pc" "$dest_cmake"

# The library stripped (the release profile builds it with full debug info), its debug info in a file of its
# own beside it, named by the library's .gnu_debuglink (the name is recorded as given, so both are made under
# their final names in a scratch directory first).
split="$(mktemp -d)"
trap 'rm -f "$log"; rm -rf "$split"' EXIT
"$objcopy" --only-keep-debug "$out/libhostfirst.so" "$split/$real.debug" || die "objcopy --only-keep-debug failed"
"$objcopy" --strip-unneeded --add-gnu-debuglink="$split/$real.debug" "$out/libhostfirst.so" "$split/$real" \
    || die "objcopy --strip-unneeded failed"
"$objcopy" --strip-debug "$out/libhostfirst.a" "$split/libhostfirst.a" || die "objcopy --strip-debug failed"

install -m 0755 "$split/$real" "$dest_lib/$real.tmp"
mv -f "$dest_lib/$real.tmp" "$dest_lib/$real"   # replace, never write into a file a running program maps
install -m 0644 "$split/$real.debug" "$dest_lib/$real.debug"
ln -sfn "$real" "$dest_lib/$soname"
ln -sfn "$real" "$dest_lib/libhostfirst.so"
install -m 0644 "$split/libhostfirst.a" "$dest_lib/libhostfirst.a"

shopt -s nullglob
headers=("$root"/include/*.h "$root"/include/*.hpp)
shopt -u nullglob
[ ${#headers[@]} -gt 0 ] || die "no headers in include/"
install -m 0644 "${headers[@]}" "$dest_inc/"

# The licence texts: hostfirst is MIT OR Apache-2.0, and both licences ask that their text go with the copies.
dest_licenses="$destdir$prefix/share/licenses/hostfirst"
mkdir -p "$dest_licenses"
install -m 0644 "$root/LICENSE-MIT" "$root/LICENSE-APACHE" "$dest_licenses/"

render packaging/hostfirst.pc.in "$dest_pc/hostfirst.pc" \
    "PREFIX=$prefix" "LIBDIR=\${prefix}/$libdir" "INCLUDEDIR=\${prefix}/$includedir" \
    "DESCRIPTION=$description" "VERSION=$version" "NATIVE_STATIC_LIBS=$native_static_libs"

render packaging/hostfirstConfig.cmake.in "$dest_cmake/hostfirstConfig.cmake" \
    "VERSION=$version" "SONAME=$soname" "CMAKEDIR=$cmakedir" "CMAKEDIR_TO_PREFIX=$up" \
    "LIBDIR_REL=$libdir" "INCLUDEDIR_REL=$includedir" "SHARED_FILE=$real" "STATIC_FILE=libhostfirst.a" \
    "CMAKE_STATIC_LIBS=$cmake_static_libs"
render packaging/hostfirstConfigVersion.cmake.in "$dest_cmake/hostfirstConfigVersion.cmake" \
    "VERSION=$version" "VERSION_MAJOR=$v_major" "VERSION_MINOR=$v_minor" "VERSION_PATCH=$v_patch" \
    "SIZEOF_VOID_P=$sizeof_void_p"

# The CLI, linked against the library just installed; the rpath is relative to the binary, so the tree can
# move (like the CMake package) and the CLI runs without LD_LIBRARY_PATH.
if [ "$cli" = 1 ]; then
    dest_bin="$destdir$prefix/bin"
    mkdir -p "$dest_bin"
    # shellcheck disable=SC2016  # $ORIGIN is for the loader, not the shell
    CC="$cc" bash "$root/cli/build.sh" "$dest_bin/hostfirst" -L"$dest_lib" -Wl,-rpath,'$ORIGIN/../'"$libdir" \
        || die "building the hostfirst CLI failed (pass --no-cli to install the library only)"
fi

echo "install.sh: installed hostfirst $version (SONAME $soname) under $destdir$prefix" >&2
