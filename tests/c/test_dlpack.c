/* C ABI of the DLPack export: a view and a row slice exported as DLManagedTensorVersioned-layout structs,
 * fields checked, the file and view freed before the data is read, deleters called (handle count back to its
 * baseline), errors for NULLs and stale handles; the options (hostfirst_dlpack_options_init, the form by
 * max_version, the typed enums, the output rules). The buffer export is exercised through its error paths here
 * (a buffer comes from a put) and with a real buffer by the Rust tests and test_handoff.c.
 * argv[1]: tests/fixtures. */
#include <stdint.h>
#include "check.h"

/* A consumer that passed no max_version (Python's max_version=None): the legacy form. */
static const hostfirst_dlpack_options LEGACY = {.struct_size = sizeof(hostfirst_dlpack_options), .legacy = 1};

/* hostfirst_dlpack_options_init and what the options select. */
static void options(hostfirst_view *view) {
    hostfirst_dlpack_options o;
    memset(&o, 0xee, sizeof o);
    CHECK_OK(hostfirst_dlpack_options_init(&o, sizeof o));
    CHECK(o.struct_size == sizeof o && o.has_stream == 0 && o.has_dl_device == 0 && o.legacy == 0);
    CHECK(o.max_version.major == 0 && o.max_version.minor == 0); /* zero: not given, the default */
    hostfirst_dlpack_copy copy = o.copy;
    CHECK(copy == HOSTFIRST_DLPACK_COPY_IF_NEEDED);
    CHECK_STATUS(hostfirst_dlpack_options_init(NULL, sizeof o), HOSTFIRST_STATUS_NULL_ARGUMENT);

    /* The defaults are a DLPack 1.1 consumer: the versioned form; the legacy output may be NULL, and when given
     * it is set to NULL. The output of the requested form is required. */
    hostfirst_dlpack_managed_tensor_versioned *v = NULL;
    hostfirst_dlpack_managed_tensor *l = (hostfirst_dlpack_managed_tensor *)(void *)&o;
    CHECK_OK(hostfirst_view_to_dlpack(view, &o, &v, &l));
    CHECK(v != NULL && l == NULL && v->flags == HOSTFIRST_DLPACK_FLAG_READ_ONLY);
    v->deleter(v);
    v = NULL;
    CHECK_STATUS(hostfirst_view_to_dlpack(view, &o, NULL, &l), HOSTFIRST_STATUS_NULL_ARGUMENT);
    CHECK_MSG("out_versioned");
    CHECK_STATUS(hostfirst_view_to_dlpack(view, &LEGACY, &v, NULL), HOSTFIRST_STATUS_NULL_ARGUMENT);
    CHECK_MSG("out_legacy");
    CHECK(v == NULL);
    /* booleans are 0 or 1 (CONVENTIONS): another value is refused, naming the field */
    hostfirst_dlpack_options odd = o;
    odd.has_stream = 2;
    CHECK_STATUS(hostfirst_view_to_dlpack(view, &odd, &v, NULL), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    CHECK_MSG("opts->has_stream is 2; expected 0 or 1");
    odd = o;
    odd.legacy = -1;
    CHECK_STATUS(hostfirst_view_to_dlpack(view, &odd, &v, &l), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    odd = o;
    odd.has_dl_device = 7;
    CHECK_STATUS(hostfirst_view_to_dlpack(view, &odd, &v, NULL), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    CHECK(v == NULL);
    /* legacy with a versioned max_version asks two forms: refused. A version below 1.0 is the legacy form. */
    hostfirst_dlpack_options both = LEGACY;
    both.max_version.major = 1;
    CHECK_STATUS(hostfirst_view_to_dlpack(view, &both, &v, &l), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    CHECK_MSG("opts->legacy is 1 (the legacy form) but opts->max_version is {1, 0}");
    hostfirst_dlpack_options old = {.struct_size = sizeof old, .max_version = {0, 8}};
    l = NULL;
    CHECK_OK(hostfirst_view_to_dlpack(view, &old, NULL, &l));
    CHECK(l != NULL);
    l->deleter(l);
    /* The flags are an OR of hostfirst_dlpack_flag values. */
    o.copy = HOSTFIRST_DLPACK_COPY_ALWAYS;
    CHECK_OK(hostfirst_view_to_dlpack(view, &o, &v, NULL));
    hostfirst_dlpack_flags flags = v->flags;
    CHECK(flags == HOSTFIRST_DLPACK_FLAG_IS_COPIED && (flags & HOSTFIRST_DLPACK_FLAG_READ_ONLY) == 0);
    hostfirst_dlpack_device_type dt = v->dl_tensor.device.device_type;
    CHECK(dt == HOSTFIRST_DLPACK_DEVICE_CPU);
    v->deleter(v);
    /* Enum values from C are checked. */
    o.copy = (hostfirst_dlpack_copy)3;
    CHECK_STATUS(hostfirst_view_to_dlpack(view, &o, &v, NULL), HOSTFIRST_STATUS_INVALID_ARGUMENT);
    CHECK_MSG("opts->copy is 3");
    o.copy = HOSTFIRST_DLPACK_COPY_IF_NEEDED;
    o.has_dl_device = 1;
    o.dl_device.device_type = (hostfirst_dlpack_device_type)7; /* kDLVulkan */
    CHECK_STATUS(hostfirst_view_to_dlpack(view, &o, &v, NULL), HOSTFIRST_STATUS_UNSUPPORTED);
    CHECK_MSG("DLPack device (7, 0)");
}

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
    CHECK_OK(hostfirst_view_to_dlpack(view, NULL, &a, NULL));
    void (*del)(hostfirst_dlpack_managed_tensor_versioned *) = a->deleter;
    del(a);
    CHECK(handles() == base);
    CHECK_OK(hostfirst_view_to_dlpack(view, NULL, &b, NULL));
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
    CHECK_OK(hostfirst_view_to_dlpack(view, &LEGACY, NULL, &la));
    void (*ldel)(hostfirst_dlpack_managed_tensor *) = la->deleter;
    ldel(la);
    CHECK_OK(hostfirst_view_to_dlpack(view, &LEGACY, NULL, &lb));
    ldel(la);
    CHECK(handles() == base + 1);
    CHECK(memcmp(lb->dl_tensor.data, want, 6 * sizeof(int32_t)) == 0);
    lb->deleter(lb);
    CHECK(handles() == base);

    /* Sixteen live exports, one deleted twice with more made in between: fifteen stay. */
    hostfirst_dlpack_managed_tensor_versioned *many[16];
    for (int i = 0; i < 16; i++) CHECK_OK(hostfirst_view_to_dlpack(view, NULL, &many[i], NULL));
    hostfirst_dlpack_managed_tensor_versioned *gone = many[7];
    gone->deleter(gone);
    CHECK_OK(hostfirst_view_to_dlpack(view, NULL, &many[7], NULL));
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
    CHECK_STATUS(hostfirst_view_to_dlpack(view, NULL, &t, NULL), HOSTFIRST_STATUS_OK);
    CHECK_STATUS(hostfirst_view_to_dlpack(rows, NULL, &r, NULL), HOSTFIRST_STATUS_OK);
    CHECK(handles() == base + 5);
    deleter_twice(view, want);
    options(view);
    CHECK(handles() == base + 5);
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
    CHECK_STATUS(hostfirst_view_to_dlpack(NULL, NULL, &none, NULL), HOSTFIRST_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(hostfirst_view_to_dlpack(view, NULL, &none, NULL), HOSTFIRST_STATUS_INVALID_HANDLE); /* freed */
    CHECK_STATUS(hostfirst_buffer_to_dlpack(NULL, NULL, &none, NULL), HOSTFIRST_STATUS_NULL_ARGUMENT);
    CHECK_STATUS(hostfirst_buffer_to_dlpack((const hostfirst_buffer *)(const void *)view, NULL, &none, NULL),
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
