#!/usr/bin/env bash
# Builds hostfirst for 64-bit Windows (x86_64-pc-windows-gnu, cross-built with mingw-w64; see
# scripts/windows-toolchain.sh) and packs it into one zip:
#
#   target/windows/hostfirst-<version>-windows-x86_64.zip, holding hostfirst-<version>-windows-x86_64/
#     bin/hostfirst.dll                      the library (stripped; imports only system DLLs)
#     bin/hostfirst.exe                      the CLI (cli/, built by cli/build.sh against the DLL)
#     lib/libhostfirst.dll.a                 import library for MinGW (gcc, clang)
#     lib/hostfirst.lib                      import library for MSVC and clang-cl (made from the .def by lld)
#     lib/hostfirst.def                      the export list (`lib /def:hostfirst.def /machine:x64` remakes the .lib)
#     lib/pkgconfig/hostfirst.pc             relocatable (${pcfiledir})
#     lib/cmake/hostfirst/hostfirstConfig.cmake, hostfirstConfigVersion.cmake   find_package(hostfirst)
#     include/hostfirst.h, include/hostfirst.hpp
#     LICENSE-MIT, LICENSE-APACHE            the licence texts (hostfirst is MIT OR Apache-2.0)
#
#   hostfirst.dll and hostfirst.exe carry a version resource (packaging/windows/version.rc, the crate's version;
#   build.rs compiles the DLL's, this script the program's).
#
#   bash scripts/package-windows.sh          # prints the zip's path on stdout
#
# tests/it/windows.rs checks the zip (export list equal to the Linux library's, import libraries, CMake and
# pkg-config consumers built and run under Wine). The first run installs the toolchain and builds std (about
# 10 minutes on 2 cores); later runs rebuild only what changed.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/windows-toolchain.sh
. scripts/windows-toolchain.sh

die() { echo "package-windows.sh: $*" >&2; exit 1; }

win_cargo build --release -p hostfirst --lib >&2 || die "cargo build for $WIN_TARGET failed"
[ -f "$WIN_OUT/hostfirst.dll" ] && [ -f "$WIN_OUT/libhostfirst.dll.a" ] || die "no hostfirst.dll in $WIN_OUT"

name="hostfirst-$HOSTFIRST_VERSION-windows-x86_64"
stage="target/windows/stage/$name"
rm -rf "target/windows/stage"
mkdir -p "$stage/bin" "$stage/lib/pkgconfig" "$stage/lib/cmake/hostfirst" "$stage/include"

"$WIN_STRIP" --strip-unneeded -o "$stage/bin/hostfirst.dll" "$WIN_OUT/hostfirst.dll"
cp "$WIN_OUT/libhostfirst.dll.a" "$stage/lib/libhostfirst.dll.a"

# The export list, from the DLL itself; every export is a hostfirst_ function (tests/it/windows.rs compares the
# list with the Linux library's).
exports="$("$WIN_OBJDUMP" -p "$stage/bin/hostfirst.dll" | sed -n '/\[Ordinal\/Name Pointer\] Table/,/^$/p' \
    | awk 'NR > 1 && /^[[:space:]]*\[/ {print $NF}')"
[ -n "$exports" ] || die "hostfirst.dll exports nothing"
if printf '%s\n' "$exports" | grep -qv '^hostfirst_'; then
    die "hostfirst.dll exports more than hostfirst_* functions: $(printf '%s\n' "$exports" | grep -v '^hostfirst_' | tr '\n' ' ')"
fi
{ echo "LIBRARY hostfirst.dll"; echo "EXPORTS"; printf '    %s\n' $exports; } > "$stage/lib/hostfirst.def"
lld="$(rustc --print sysroot)/lib/rustlib/$(rustc -vV | sed -n 's/^host: //p')/bin/rust-lld"
[ -x "$lld" ] || die "rust-lld not found at $lld (it comes with the Rust toolchain)"
"$lld" -flavor link /lib /nologo /machine:x64 "/def:$stage/lib/hostfirst.def" "/out:$stage/lib/hostfirst.lib" >&2 \
    || die "making the MSVC import library failed"
rm -f "$stage/lib/hostfirst.exp"

cp include/*.h include/*.hpp "$stage/include/"
cp LICENSE-MIT LICENSE-APACHE "$stage/"

description="$(sed -n 's/^description = "\(.*\)"/\1/p' Cargo.toml | head -n 1 | sed 's/[|&\\]/\\&/g')"
sed -e "s|@VERSION@|$HOSTFIRST_VERSION|g" -e "s|@DESCRIPTION@|$description|g" packaging/windows/hostfirst.pc.in \
    > "$stage/lib/pkgconfig/hostfirst.pc"
sed -e "s|@VERSION@|$HOSTFIRST_VERSION|g" packaging/windows/hostfirstConfig.cmake.in \
    > "$stage/lib/cmake/hostfirst/hostfirstConfig.cmake"
IFS=. read -r v_major v_minor v_patch <<<"$HOSTFIRST_VERSION"
sed -e "s|@VERSION@|$HOSTFIRST_VERSION|g" -e "s|@VERSION_MAJOR@|$v_major|g" -e "s|@VERSION_MINOR@|$v_minor|g" \
    -e "s|@VERSION_PATCH@|$v_patch|g" -e "s|@SIZEOF_VOID_P@|8|g" packaging/hostfirstConfigVersion.cmake.in \
    | sed '1s|written by scripts/install.sh|written by scripts/package-windows.sh|' \
    > "$stage/lib/cmake/hostfirst/hostfirstConfigVersion.cmake"
if grep -n '@[A-Z_]*@' "$stage/lib/pkgconfig/hostfirst.pc" "$stage/lib/cmake/hostfirst/"*.cmake >&2; then
    die "a placeholder was left unfilled"
fi

# The CLI against the import library; winpthreads (clock_gettime) linked in statically, so the program needs
# nothing beside it but hostfirst.dll; C99's printf (mingw-w64's, not msvcrt's: %zu, %llu).
# (-Bstatic applies to what follows: the import library is named as a file, winpthreads and the C runtime's
# import libraries are all .a files.)
# Its version resource: the .rc of the DLL's (build.rs), for a program.
exe_rc="target/windows/hostfirst-exe-version.o"
IFS=. read -r r_major r_minor r_patch <<<"${HOSTFIRST_VERSION%%[-+]*}"
"$WIN_WINDRES" "-DHF_MAJOR=$r_major" "-DHF_MINOR=$r_minor" "-DHF_PATCH=$r_patch" "-DHF_VERSION=\\\"$HOSTFIRST_VERSION\\\"" \
    -DHF_EXE=1 -O coff -i packaging/windows/version.rc -o "$exe_rc" || die "windres failed on packaging/windows/version.rc"
CC="$WIN_CC" HOSTFIRST_LIB="$stage/lib/libhostfirst.dll.a" \
    bash cli/build.sh "$stage/bin/hostfirst.exe" "$exe_rc" -D__USE_MINGW_ANSI_STDIO=1 -static-libgcc -Wl,-Bstatic >&2
"$WIN_STRIP" --strip-unneeded "$stage/bin/hostfirst.exe"

mkdir -p target/windows
zip="target/windows/$name.zip"
rm -f "$zip"
(cd "target/windows/stage" && python3 -m zipfile -c "../$name.zip" "$name") || die "writing $zip failed"
echo "package-windows.sh: $zip" >&2
echo "$PWD/$zip"
