/* hostfirst_dlpack_capsule_destructor on Windows: the library finds PyCapsule_IsValid and PyCapsule_GetPointer in a
 * module loaded into the process (here fake_python.dll, as python3X.dll in a Python process) and releases an
 * export whose capsule no consumer took, in both forms; a consumed capsule ("used_dltensor...") and NULL are left
 * alone. Handle count back to its baseline. argv[1]: tests/fixtures. (On Linux the Python tests cover it.) */
#define WIN32_LEAN_AND_MEAN
#define HOSTFIRST_EXPERIMENTAL /* the capsule destructor is in the experimental tier */
#include <windows.h>
#include "check.h"

typedef struct {
    const char *name;
    void *pointer;
} fake_capsule;

static const hostfirst_dlpack_options LEGACY = {.struct_size = sizeof(hostfirst_dlpack_options), .legacy = 1};

int main(int argc, char **argv) {
    CHECK(argc == 2);
    /* Loaded before the first destructor call (which looks the functions up once). */
    CHECK(LoadLibraryA("fake_python.dll") != NULL);
    char path[1200];
    snprintf(path, sizeof path, "%s/tokens.safetensors", argv[1]);
    hostfirst_file *f = NULL;
    hostfirst_view *v = NULL;
    CHECK_OK(hostfirst_file_open(path, &f));
    CHECK_OK(hostfirst_file_view_at(f, 0, &v));
    size_t base = live_handles();

    hostfirst_dlpack_managed_tensor_versioned *t = NULL;
    CHECK_OK(hostfirst_view_to_dlpack(v, NULL, &t, NULL));
    CHECK(live_handles() == base + 1);
    fake_capsule versioned = {"dltensor_versioned", t};
    hostfirst_dlpack_capsule_destructor(&versioned);
    CHECK(live_handles() == base);

    hostfirst_dlpack_managed_tensor *l = NULL;
    CHECK_OK(hostfirst_view_to_dlpack(v, &LEGACY, NULL, &l));
    CHECK(live_handles() == base + 1);
    fake_capsule legacy = {"dltensor", l};
    hostfirst_dlpack_capsule_destructor(&legacy);
    CHECK(live_handles() == base);

    CHECK_OK(hostfirst_view_to_dlpack(v, NULL, &t, NULL));
    fake_capsule used = {"used_dltensor_versioned", t};
    hostfirst_dlpack_capsule_destructor(&used); /* a consumer took it: its deleter is the consumer's to call */
    hostfirst_dlpack_capsule_destructor(NULL);
    CHECK(live_handles() == base + 1);
    t->deleter(t);
    CHECK(live_handles() == base);

    CHECK_OK(hostfirst_view_free(v));
    CHECK_OK(hostfirst_file_free(f));
    printf("ok\n");
    return 0;
}
