/* A test-only stand-in for bcryptprimitives.dll, which Wine 8.0 (Debian 12) lacks and Windows 10+ has: Rust's
 * standard library imports ProcessPrng from it, so without it no Rust-built DLL or program starts under that Wine.
 * ProcessPrng fills a buffer with random bytes; here through RtlGenRandom (advapi32's SystemFunction036), which
 * Wine has. Installed into the test Wine prefix's system32 by scripts/test-windows.sh; never shipped. */
#include <windows.h>

BOOLEAN WINAPI SystemFunction036(PVOID buffer, ULONG length); /* RtlGenRandom */

__declspec(dllexport) BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len) {
    while (len > 0) {
        ULONG n = len > 0x10000000 ? 0x10000000 : (ULONG)len;
        if (!SystemFunction036(data, n)) return FALSE;
        data += n;
        len -= n;
    }
    return TRUE;
}
