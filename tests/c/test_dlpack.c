/* C ABI of the DLPack export: a view and a row slice exported as DLManagedTensorVersioned-layout structs,
 * fields checked, the file and view freed before the data is read, deleters called (handle count back to its
 * baseline), errors for NULLs and stale handles. The buffer export is exercised through its error paths here
 * (a buffer comes from a put) and with a real buffer by the Rust tests. argv[1]: tests/fixtures. */
#include <stdint.h>
#include "check.h"

static size_t handles(void) {
    size_t n = 0;
    CHECK_STATUS(hostfirst_handle_count(&n), HOSTFIRST_STATUS_OK);
    return n;
}

/* A deleter called twice: the second call is ignored, also when a newer export was made in between (with
 * plain malloc it would get the same address, and a second call must not free it). Both forms, and a third
 * export after many more exports and deletions. The live count must stay right throughout. */
static void deleter_twice(hostfirst_view *view, const int32_t *want) {
    size_t base = handles();
    hostfirst_dlpack_managed_tensor_versioned *a = NULL, *b = NULL;
    CHECK_OK(hostfirst_view_to_dlpack(view, &a));
    void (*del)(hostfirst_dlpack_managed_tensor_versioned *) = a->deleter;
    del(a);
    CHECK(handles() == base);
    CHECK_OK(hostfirst_view_to_dlpack(view, &b));
    CHECK(handles() == base + 1);
    del(a); /* again: ignored, whatever now lives at that address */
    CHECK(handles() == base + 1);
    CHECK(memcmp(b->dl_tensor.data, want, 6 * sizeof(int32_t)) == 0);
    b->deleter(b);
    CHECK(handles() == base);
    del(b);
    del(a);
    CHECK(handles() == base);

    hostfirst_dlpack_managed_tensor *la = NULL, *lb = NULL;
    CHECK_OK(hostfirst_view_to_dlpack_legacy(view, &la));
    void (*ldel)(hostfirst_dlpack_managed_tensor *) = la->deleter;
    ldel(la);
    CHECK_OK(hostfirst_view_to_dlpack_legacy(view, &lb));
    ldel(la);
    CHECK(handles() == base + 1);
    CHECK(memcmp(lb->dl_tensor.data, want, 6 * sizeof(int32_t)) == 0);
    lb->deleter(lb);
    CHECK(handles() == base);

    /* Sixteen live exports, one deleted twice with more made in between: fifteen stay. */
    hostfirst_dlpack_managed_tensor_versioned *many[16];
    for (int i = 0; i < 16; i++) CHECK_OK(hostfirst_view_to_dlpack(view, &many[i]));
    hostfirst_dlpack_managed_tensor_versioned *gone = many[7];
    gone->deleter(gone);
    CHECK_OK(hostfirst_view_to_dlpack(view, &many[7]));
    del(gone);
    CHECK(handles() == base + 16);
    for (int i = 0; i < 16; i++) {
        CHECK(memcmp(many[i]->dl_tensor.data, want, 6 * sizeof(int32_t)) == 0);
        many[i]->deleter(many[i]);
    }
    CHECK(handles() == base);
}

int main(int argc, char **argv) {
    CHECK(argc == 2);
    char path[2048];
    snprintf(path, sizeof path, "%s/basic.safetensors", argv[1]);
    size_t base = handles();

    hostfirst_file *file = NULL;
    CHECK_STATUS(hostfirst_file_open(path, &file), HOSTFIRST_STATUS_OK);
    hostfirst_view *view = NULL, *rows = NULL;
    CHECK_STATUS(hostfirst_file_view(file, "i32", &view), HOSTFIRST_STATUS_OK);
    CHECK_STATUS(hostfirst_view_slice_rows(view, 1, 2, &rows), HOSTFIRST_STATUS_OK);
    hostfirst_view_info info = {.struct_size = sizeof info};
    CHECK_STATUS(hostfirst_view_describe(view, &info), HOSTFIRST_STATUS_OK);
    int32_t want[6];
    CHECK_STATUS(hostfirst_view_copy(view, want, sizeof want, NULL), HOSTFIRST_STATUS_OK);

    hostfirst_dlpack_managed_tensor_versioned *t = NULL, *r = NULL;
    CHECK_STATUS(hostfirst_view_to_dlpack(view, &t), HOSTFIRST_STATUS_OK);
    CHECK_STATUS(hostfirst_view_to_dlpack(rows, &r), HOSTFIRST_STATUS_OK);
    CHECK(handles() == base + 5);
    deleter_twice(view, want);
    CHECK(hostfirst_view_free(rows) == HOSTFIRST_STATUS_OK && hostfirst_view_free(view) == HOSTFIRST_STATUS_OK);
    CHECK(hostfirst_file_free(file) == HOSTFIRST_STATUS_OK);
    CHECK(handles() == base + 2); /* the two exports */

    CHECK(t->version.major == HOSTFIRST_DLPACK_MAJOR_VERSION && t->version.minor == HOSTFIRST_DLPACK_MINOR_VERSION);
    CHECK(t->version.major == 1 && t->version.minor == 1);
    CHECK(t->flags == HOSTFIRST_DLPACK_FLAG_READ_ONLY);
    CHECK(t->deleter != NULL && t->manager_ctx != NULL);
    CHECK(t->dl_tensor.device.device_type == HOSTFIRST_DLPACK_DEVICE_CPU && t->dl_tensor.device.device_id == 0);
    CHECK(t->dl_tensor.dtype.code == 0 && t->dl_tensor.dtype.bits == 32 && t->dl_tensor.dtype.lanes == 1);
    CHECK(t->dl_tensor.ndim == 2 && t->dl_tensor.shape[0] == 2 && t->dl_tensor.shape[1] == 3);
    CHECK(t->dl_tensor.strides == NULL && t->dl_tensor.byte_offset == 0);
    CHECK(t->dl_tensor.data == info.data); /* zero-copy: the mapping */
    CHECK(memcmp(t->dl_tensor.data, want, sizeof want) == 0); /* still mapped after every handle was freed */
    CHECK(r->dl_tensor.ndim == 2 && r->dl_tensor.shape[0] == 1 && r->dl_tensor.shape[1] == 3);
    CHECK((const char *)r->dl_tensor.data == (const char *)info.data + 3 * sizeof(int32_t));
    CHECK(memcmp(r->dl_tensor.data, want + 3, 3 * sizeof(int32_t)) == 0);

    t->deleter(t);
    CHECK(handles() == base + 1);
    r->deleter(r);
    CHECK(handles() == base);

    /* errors: outputs untouched */
    hostfirst_dlpack_managed_tensor_versioned *none = NULL;
    CHECK_STATUS(hostfirst_view_to_dlpack(NULL, &none), HOSTFIRST_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(hostfirst_view_to_dlpack(view, &none), HOSTFIRST_STATUS_INVALID_HANDLE); /* freed */
    CHECK_STATUS(hostfirst_buffer_to_dlpack(NULL, &none), HOSTFIRST_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(hostfirst_buffer_to_dlpack((const hostfirst_buffer *)(const void *)view, &none),
                 HOSTFIRST_STATUS_INVALID_HANDLE);
    CHECK(none == NULL);

    /* every dtype has a DLPack 1.1 code */
    hostfirst_dlpack_dtype d;
    CHECK_STATUS(hostfirst_dtype_to_dlpack(HOSTFIRST_DTYPE_BF16, &d), HOSTFIRST_STATUS_OK);
    CHECK(d.code == 4 && d.bits == 16 && d.lanes == 1);
    CHECK_STATUS(hostfirst_dtype_to_dlpack(HOSTFIRST_DTYPE_F4, &d), HOSTFIRST_STATUS_OK);
    CHECK(d.code == 17 && d.bits == 4);
    for (uint32_t v = 1; strcmp(hostfirst_dtype_name(v), "UNKNOWN") != 0; v++)
        CHECK_STATUS(hostfirst_dtype_to_dlpack(v, &d), HOSTFIRST_STATUS_OK);
    CHECK_STATUS(hostfirst_dtype_to_dlpack(0, &d), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    puts("test_dlpack: ok");
    return 0;
}
