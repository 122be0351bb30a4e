/* The control of tests/it/windows.rs's DLL-planting test: loads each library named on the command line by its bare
 * name, with Windows' default search order (LoadLibraryW), as hostfirst used to load nvcuda.dll and nvml.dll, and
 * prints "NAME: loaded" or "NAME: not loaded". Never shipped. */
#include <stdio.h>
#include <windows.h>

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        wchar_t name[MAX_PATH];
        if (!MultiByteToWideChar(CP_UTF8, 0, argv[i], -1, name, MAX_PATH)) return 2;
        printf("%s: %s\n", argv[i], LoadLibraryW(name) ? "loaded" : "not loaded");
    }
    return 0;
}
