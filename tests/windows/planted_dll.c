/* A test-only DLL planted where a user's files lie (a downloaded model's folder, a directory on PATH) under the name
 * of a system library hostfirst loads (nvcuda.dll, nvml.dll). Whatever process loads it, its DllMain leaves a
 * marker file beside it, "<its own path>.loaded"; tests/it/windows.rs checks that hostfirst.exe never does, and
 * that a plain LoadLibrary by name (tests/windows/load_by_name.c) does, so that the check can fail. Its cuInit
 * answers 999 (CUDA_ERROR_UNKNOWN), should the marker ever be missed. Never shipped. */
#include <wchar.h>
#include <windows.h>

BOOL WINAPI DllMain(HINSTANCE self, DWORD reason, LPVOID reserved) {
    (void)reserved;
    if (reason == DLL_PROCESS_ATTACH) {
        wchar_t path[MAX_PATH + 16];
        DWORD n = GetModuleFileNameW(self, path, MAX_PATH);
        if (n > 0 && n < MAX_PATH) {
            wcscpy(path + n, L".loaded");
            HANDLE h = CreateFileW(path, GENERIC_WRITE, 0, NULL, CREATE_ALWAYS, FILE_ATTRIBUTE_NORMAL, NULL);
            if (h != INVALID_HANDLE_VALUE) CloseHandle(h);
        }
    }
    return TRUE;
}

__declspec(dllexport) unsigned cuInit(unsigned flags) {
    (void)flags;
    return 999;
}
