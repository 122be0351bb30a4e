# The Windows cross toolchain (x86_64-pc-windows-gnu), made ready on a Debian machine. Sourced (not run) by
# scripts/package-windows.sh and scripts/test-windows.sh; defines `win_cargo` and the variables below.
#
# What it needs, and installs when missing (docs/PACKAGING.md, "Windows", has the why of each step):
#   - mingw-w64's C compiler and linker (Debian: gcc-mingw-w64-x86-64, g++-mingw-w64-x86-64) and Wine
#     (wine64), with apt, as scripts/test.sh installs its other tools;
#   - the Rust standard library's sources of exactly the rustc version rust-toolchain.toml pins: Debian's
#     `rust-src` package of that version, from the backports suite that carries it, fetched with apt through a
#     private sources list, state and cache under target/win-apt (the system's apt configuration is never
#     changed) and unpacked under target/;
#   - a copy of the toolchain (hard links) with those sources in its sysroot, under target/win-tc-<version>:
#     with it, `cargo -Zbuild-std` (RUSTC_BOOTSTRAP=1, on the stable compiler) builds std for Windows; the
#     installed toolchain is never touched.
# Everything lands under target/ and is reused: the second run does no download and no std build.
#
# After sourcing:
#   win_cargo CMD ARGS...  cargo CMD for the Windows target (std built as needed; output under target/win)
#   WIN_TARGET         x86_64-pc-windows-gnu
#   WIN_OUT            target/win/x86_64-pc-windows-gnu/release (absolute)
#   WIN_CC, WIN_STRIP, WIN_OBJDUMP, WIN_DLLTOOL, WIN_WINDRES   the mingw-w64 tools
#   WINE               the wine64 loader (Debian keeps it off PATH, in /usr/lib/wine)
#   HOSTFIRST_VERSION  the crate's version
# Environment: WIN_RUST_SRC_SUITE (default trixie-backports), WIN_APT_MIRROR (default: the first mirror of the
# system's own sources).

win_die() { echo "windows-toolchain.sh: $*" >&2; exit 1; }
win_have() { command -v "$1" >/dev/null 2>&1; }

WIN_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WIN_TARGET=x86_64-pc-windows-gnu
WIN_CC=x86_64-w64-mingw32-gcc
WIN_STRIP=x86_64-w64-mingw32-strip
WIN_OBJDUMP=x86_64-w64-mingw32-objdump
WIN_DLLTOOL=x86_64-w64-mingw32-dlltool
WIN_WINDRES=x86_64-w64-mingw32-windres
WIN_OUT="$WIN_ROOT/target/win/$WIN_TARGET/release"
HOSTFIRST_VERSION="$(sed -n 's/^version = "\(.*\)"/\1/p' "$WIN_ROOT/Cargo.toml" | head -n 1)"

# --- mingw-w64 and Wine (Debian packages)
WINE="${WINE:-}"
if [ -z "$WINE" ]; then
    for w in wine64 /usr/lib/wine/wine64 /usr/lib64/wine/wine64; do
        if win_have "$w"; then WINE="$(command -v "$w")"; break; fi
    done
fi
# apt_install and apt_get (scripts/apt.sh): every apt-get call waits for another apt run's locks (an upgrade at
# boot) and fails saying why.
# shellcheck source=scripts/apt.sh
. "$WIN_ROOT/scripts/apt.sh"
if ! win_have "$WIN_CC" || ! win_have x86_64-w64-mingw32-g++ || ! win_have "$WIN_WINDRES" || [ -z "$WINE" ]; then
    echo "windows-toolchain.sh: mingw-w64 and wine64 are needed (about 1.4 GB)" >&2
    APT_WHO=windows-toolchain.sh apt_install gcc-mingw-w64-x86-64 g++-mingw-w64-x86-64 wine64
    WINE="$(command -v wine64 || echo /usr/lib/wine/wine64)"
fi
[ -x "$WINE" ] || win_die "wine64 not found (looked on PATH and in /usr/lib/wine)"

# --- the standard library's sources for exactly this rustc
win_pinned="$(sed -n 's/^channel = "\(.*\)"/\1/p' "$WIN_ROOT/rust-toolchain.toml" 2>/dev/null | head -n 1)"
win_rustc_version="$(cd "$WIN_ROOT" && rustc -V 2>/dev/null | awk '{print $2}')" || true
[ -n "$win_rustc_version" ] || win_die "rustc does not run here; is the toolchain rust-toolchain.toml pins \
(${win_pinned:-?}) installed? (rustup toolchain install ${win_pinned:-<version>})"
win_sysroot="$(cd "$WIN_ROOT" && rustc --print sysroot)"
WIN_TC="$WIN_ROOT/target/win-tc-$win_rustc_version"
if [ ! -f "$WIN_TC/.ready" ]; then
    apt_dir="$WIN_ROOT/target/win-apt"
    suite="${WIN_RUST_SRC_SUITE:-trixie-backports}"
    mirror="${WIN_APT_MIRROR:-}"
    if [ -z "$mirror" ]; then
        mirror="$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)"
        [ -n "$mirror" ] || mirror="$(awk '$1 == "deb" && $2 !~ /^\[/ {print $2; exit} $1 == "deb" {print $3; exit}' \
            /etc/apt/sources.list 2>/dev/null || true)"
        [ -n "$mirror" ] || mirror="http://deb.debian.org/debian"
    fi
    win_have apt-get && win_have dpkg-deb || win_die "apt-get and dpkg-deb are needed to fetch Debian's rust-src"
    mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial"
    touch "$apt_dir/status"
    keyring=/usr/share/keyrings/debian-archive-keyring.gpg
    [ -f "$keyring" ] || win_die "$keyring is missing (Debian's debian-archive-keyring package)"
    echo "deb [signed-by=$keyring] $mirror $suite main" > "$apt_dir/sources.list"
    apt_opts=(-o "Dir::Etc::SourceList=$apt_dir/sources.list" -o Dir::Etc::SourceParts=/dev/null
        -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache" -o "Dir::State::status=$apt_dir/status"
        -o APT::Sandbox::User=root)
    echo "windows-toolchain.sh: looking for rust-src $win_rustc_version in $mirror $suite (private apt list)" >&2
    apt_get "${apt_opts[@]}" -qq update >&2 || win_die "apt-get update of $mirror $suite failed (private list in $apt_dir)"
    available="$(apt-cache "${apt_opts[@]}" madison rust-src 2>/dev/null | awk -F'|' '{gsub(/ /, "", $2); print $2}')"
    pick="$(printf '%s\n' "$available" | grep -E "^${win_rustc_version//./\\.}\+dfsg" | sort -V | tail -n 1 || true)"
    if [ -z "$pick" ]; then
        have_versions="$(printf '%s\n' "$available" | sed 's/+dfsg.*//' | sort -uV | xargs)"
        win_die "Debian's $suite has no rust-src for rustc $win_rustc_version (it has: ${have_versions:-none}). \
Pin one of those in rust-toolchain.toml (that toolchain installed), or set WIN_RUST_SRC_SUITE to a suite with it."
    fi
    rm -f "$apt_dir"/rust-src_*.deb
    (cd "$apt_dir" && apt_get "${apt_opts[@]}" -qq download "rust-src=$pick") >&2 \
        || win_die "downloading rust-src=$pick failed"
    deb="$(ls "$apt_dir"/rust-src_*.deb)"
    rm -rf "$apt_dir/x"
    mkdir -p "$apt_dir/x"
    # The package's usr/lib/rustlib/src/rust is a link to usr/src/rustc-<version>, which holds library/.
    dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$apt_dir/x" --wildcards './usr/src/rustc-*/library' \
        || win_die "unpacking library/ out of $deb failed"
    lib_src="$(ls -d "$apt_dir"/x/usr/src/rustc-*/library | head -n 1)"
    [ -f "$lib_src/Cargo.lock" ] && [ -d "$lib_src/std" ] || win_die "$deb holds no library/ sources with a Cargo.lock"
    # The toolchain copy: hard links where target/ shares the file system with the toolchain, else a copy.
    rm -rf "$WIN_TC"
    mkdir -p "$WIN_TC"
    cp -al "$win_sysroot/." "$WIN_TC/" 2>/dev/null || { rm -rf "$WIN_TC"; mkdir -p "$WIN_TC"; cp -a "$win_sysroot/." "$WIN_TC/"; }
    rm -rf "$WIN_TC/lib/rustlib/src"
    mkdir -p "$WIN_TC/lib/rustlib/src/rust"
    cp -a "$lib_src" "$WIN_TC/lib/rustlib/src/rust/library"
    [ "$("$WIN_TC/bin/rustc" -V | awk '{print $2}')" = "$win_rustc_version" ] || win_die "the toolchain copy's rustc is not $win_rustc_version"
    echo "$pick" > "$WIN_TC/.ready"
    rm -rf "$apt_dir/x" "$deb"
    echo "windows-toolchain.sh: rust-src $pick in $WIN_TC" >&2
fi

# cargo for Windows: std built from the sources above (-Zbuild-std, allowed on stable by RUSTC_BOOTSTRAP=1),
# linked by mingw-w64, in a target directory of its own (target/win) so Linux builds never wait for it or
# invalidate it. No debug info: a smaller DLL and a third less build time (the Linux build keeps full debug info
# for the ABI checks, which do not apply to a DLL).
win_cargo() {
    PATH="$WIN_TC/bin:$PATH" RUSTC="$WIN_TC/bin/rustc" RUSTDOC="$WIN_TC/bin/rustdoc" RUSTC_BOOTSTRAP=1 \
        CARGO_TARGET_DIR="$WIN_ROOT/target/win" CARGO_PROFILE_RELEASE_DEBUG=0 \
        CARGO_TARGET_X86_64_PC_WINDOWS_GNU_LINKER="$WIN_CC" \
        nice "$WIN_TC/bin/cargo" "$1" -Zbuild-std --target "$WIN_TARGET" "${@:2}"
}
