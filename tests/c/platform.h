/* What the C tests meet differently on POSIX systems and on Windows, in one place (the tests themselves hold
 * #ifdef _WIN32 only where what they assert differs).
 *
 * Files that change under a mapping (the header's "Files that change while open"): POSIX lets a file shrink
 * while hostfirst maps it; hostfirst's copies of it then give HOSTFIRST_STATUS_TRUNCATED and touching the mapping
 * past the new end raises SIGBUS. Windows refuses to shrink a file while any mapping of it lives: the writer gets
 * ERROR_USER_MAPPED_FILE (1224), and every view, buffer and copy keeps the bytes it had.
 *
 *   MAPPED_FILES_SHRINK        1 where a mapped file can shrink (POSIX), 0 on Windows
 *   SHRINK_REFUSED_WHILE_MAPPED  what shrink_file returns on Windows for a file a mapping holds (1224)
 *   shrink_file(path, len)     cuts the file to `len` bytes: 0, or the system's reason (errno; a Windows error code)
 *
 * Replacing a mapped file (the writer's rename over its target): POSIX renames over a file whatever maps it (the
 * mapping keeps the old bytes); Windows refuses while any mapping of the target lives (ERROR_ACCESS_DENIED, which
 * the writer reports as HOSTFIRST_STATUS_PERMISSION_DENIED, the target unchanged).
 *
 *   MAPPED_FILES_REPLACEABLE   1 where a mapped file can be renamed over (POSIX), 0 on Windows
 *
 * Needs _DEFAULT_SOURCE or _POSIX_C_SOURCE >= 200809L defined before the first #include (truncate). */
#ifndef HOSTFIRST_TEST_PLATFORM_H
#define HOSTFIRST_TEST_PLATFORM_H

#include <stddef.h>
#include <stdint.h>

#ifdef _WIN32
#define WIN32_LEAN_AND_MEAN
#define NOMINMAX
#include <windows.h>

#define MAPPED_FILES_SHRINK 0
#define SHRINK_REFUSED_WHILE_MAPPED ERROR_USER_MAPPED_FILE
#define MAPPED_FILES_REPLACEABLE 0

static inline int shrink_file(const char *path, uint64_t len) {
    HANDLE h = CreateFileA(path, GENERIC_WRITE, FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE, NULL,
                           OPEN_EXISTING, FILE_ATTRIBUTE_NORMAL, NULL);
    if (h == INVALID_HANDLE_VALUE) return (int)GetLastError();
    LARGE_INTEGER at;
    at.QuadPart = (LONGLONG)len;
    int rc = SetFilePointerEx(h, at, NULL, FILE_BEGIN) && SetEndOfFile(h) ? 0 : (int)GetLastError();
    CloseHandle(h);
    return rc;
}

#else
#include <errno.h>
#include <unistd.h>

#define MAPPED_FILES_SHRINK 1
#define SHRINK_REFUSED_WHILE_MAPPED (-1) /* never returned */
#define MAPPED_FILES_REPLACEABLE 1

static inline int shrink_file(const char *path, uint64_t len) { return truncate(path, (off_t)len) == 0 ? 0 : errno; }
#endif

#endif
