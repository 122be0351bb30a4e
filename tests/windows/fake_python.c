/* A test-only stand-in for the two CPython functions that hostfirst_dlpack_capsule_destructor looks up at run time,
 * PyCapsule_IsValid and PyCapsule_GetPointer, exported from a DLL as python3X.dll exports them, over a fake capsule
 * {name, pointer}. tests/windows/test_capsule.c loads it; tests/it/windows.rs builds both. Never shipped. */
#include <stddef.h>
#include <string.h>

typedef struct {
    const char *name;
    void *pointer;
} fake_capsule;

__declspec(dllexport) int PyCapsule_IsValid(void *o, const char *name) {
    const fake_capsule *c = o;
    return c != NULL && c->pointer != NULL && c->name != NULL && name != NULL && strcmp(c->name, name) == 0;
}

__declspec(dllexport) void *PyCapsule_GetPointer(void *o, const char *name) {
    return PyCapsule_IsValid(o, name) ? ((fake_capsule *)o)->pointer : NULL;
}
