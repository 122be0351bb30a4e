/* Reads the version resource of a PE file the way Windows programs do (GetFileVersionInfoW, VerQueryValueW) and
 * prints it, one `key=value` line each, in UTF-8:
 *
 *   fixed=M.m.p.b        VS_FIXEDFILEINFO's file version      product=M.m.p.b   its product version
 *   type=N               dwFileType (1 an application, 2 a DLL)
 *   NAME=TEXT            each string of the U.S. English / Unicode block (040904B0) that exists
 *
 * Exit status 0 when the file has a version resource, 1 when it has none (the error code on stderr), 2 on misuse.
 * tests/it/windows.rs builds it with mingw-w64 (-Wall -Wextra -Werror) and runs it under Wine on the packaged
 * hostfirst.dll and hostfirst.exe. Never shipped. */
#include <stdio.h>
#include <stdlib.h>
#include <windows.h>

static const wchar_t *const NAMES[] = {L"CompanyName",  L"FileDescription", L"FileVersion",    L"InternalName",
                                       L"LegalCopyright", L"OriginalFilename", L"ProductName", L"ProductVersion"};

static void print_utf8(const wchar_t *w) {
    char buf[1024];
    int n = WideCharToMultiByte(CP_UTF8, 0, w, -1, buf, (int)sizeof buf, NULL, NULL);
    fputs(n > 0 ? buf : "?", stdout);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: file_version FILE\n");
        return 2;
    }
    wchar_t path[MAX_PATH];
    if (MultiByteToWideChar(CP_UTF8, 0, argv[1], -1, path, MAX_PATH) == 0) {
        fprintf(stderr, "file_version: bad path %s\n", argv[1]);
        return 2;
    }
    DWORD ignored = 0;
    DWORD size = GetFileVersionInfoSizeW(path, &ignored);
    if (size == 0) {
        fprintf(stderr, "file_version: %s: no version resource (error %lu)\n", argv[1], (unsigned long)GetLastError());
        return 1;
    }
    void *info = malloc(size);
    if (info == NULL || !GetFileVersionInfoW(path, 0, size, info)) {
        fprintf(stderr, "file_version: %s: GetFileVersionInfoW failed (error %lu)\n", argv[1],
                (unsigned long)GetLastError());
        return 1;
    }
    VS_FIXEDFILEINFO *fixed = NULL;
    UINT len = 0;
    if (!VerQueryValueW(info, L"\\", (void **)&fixed, &len) || len < sizeof *fixed ||
        fixed->dwSignature != 0xFEEF04BDu) {
        fprintf(stderr, "file_version: %s: no VS_FIXEDFILEINFO\n", argv[1]);
        return 1;
    }
    printf("fixed=%lu.%lu.%lu.%lu\n", (unsigned long)HIWORD(fixed->dwFileVersionMS),
           (unsigned long)LOWORD(fixed->dwFileVersionMS), (unsigned long)HIWORD(fixed->dwFileVersionLS),
           (unsigned long)LOWORD(fixed->dwFileVersionLS));
    printf("product=%lu.%lu.%lu.%lu\n", (unsigned long)HIWORD(fixed->dwProductVersionMS),
           (unsigned long)LOWORD(fixed->dwProductVersionMS), (unsigned long)HIWORD(fixed->dwProductVersionLS),
           (unsigned long)LOWORD(fixed->dwProductVersionLS));
    printf("type=%lu\n", (unsigned long)fixed->dwFileType);
    for (size_t i = 0; i < sizeof NAMES / sizeof NAMES[0]; i++) {
        wchar_t key[128];
        _snwprintf(key, sizeof key / sizeof key[0], L"\\StringFileInfo\\040904B0\\%ls", NAMES[i]);
        key[sizeof key / sizeof key[0] - 1] = 0;
        wchar_t *value = NULL;
        if (VerQueryValueW(info, key, (void **)&value, &len) && value != NULL) {
            print_utf8(NAMES[i]);
            putchar('=');
            print_utf8(value);
            putchar('\n');
        }
    }
    free(info);
    return 0;
}
