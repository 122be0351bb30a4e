/* hostfirst._native: the hot Python paths in one C call each, a thin skin over the C ABI (issue 44, point 1).
 *
 * It implements nothing of its own: every tensor operation is a call of a hostfirst_* function of the very
 * libhostfirst the package loaded with ctypes. `bind` receives those functions' addresses from ctypes (the
 * table below, in the order of hostfirst/_fast.py's BOUND), so the extension links no library but CPython's
 * stable ABI: one binary serves every CPython >= 3.9 (Py_LIMITED_API, abi3), whatever library path ctypes
 * chose (the wheel's own, HOSTFIRST_LIBRARY, a checkout's target/), on Linux and Windows alike.
 *
 * What it saves is the per-call cost of ctypes (argument conversion, byref objects, a struct mirror, the
 * Python frames between the calls): `owned` makes a whole tensor's owned numpy array in one call, `names`
 * lists a file's tensor names in one, `view` and `narrow` make a view and describe it in one (a capsule frees
 * it), `copy` copies any view into an owned array. Any status other than OK makes it return None having changed nothing
 * the caller sees (the view it made is freed): the ctypes path then redoes the call and raises the exception
 * it always raised, with the library's message, so behaviour stays that of the ctypes path by construction.
 */
#define Py_LIMITED_API 0x03090000
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "hostfirst.h" /* include/: the types; no function of it is linked (they come from bind) */

typedef hostfirst_view_info hf_view_info;

static struct {
    hostfirst_status (*file_view)(const struct hostfirst_file *, const char *, struct hostfirst_view **);
    hostfirst_status (*view_describe)(const struct hostfirst_view *, struct hostfirst_view_info *);
    hostfirst_status (*view_copy)(const struct hostfirst_view *, void *, size_t, uint64_t *);
    hostfirst_status (*view_free)(struct hostfirst_view *);
    hostfirst_status (*file_tensor_name)(const struct hostfirst_file *, size_t, const char **);
    hostfirst_status (*view_narrow)(const struct hostfirst_view *, uint32_t, uint64_t, uint64_t,
                                    struct hostfirst_view **);
} hf;

/* The pointers' types are the header's prototypes (-Werror refuses distinct pointer types); sizeof evaluates
 * nothing, so no symbol of the library is referenced. */
static void prototypes_match(void) {
    (void)sizeof(hf.file_view == &hostfirst_file_view);
    (void)sizeof(hf.view_describe == &hostfirst_view_describe);
    (void)sizeof(hf.view_copy == &hostfirst_view_copy);
    (void)sizeof(hf.view_free == &hostfirst_view_free);
    (void)sizeof(hf.file_tensor_name == &hostfirst_file_tensor_name);
    (void)sizeof(hf.view_narrow == &hostfirst_view_narrow);
}
static int bound = 0;

/* Copies above this size let other Python threads run meanwhile. */
#define RELEASE_GIL_BYTES (1u << 20)

/* hostfirst_view_copy of `nbytes` into `dst`, without the GIL for large copies. */
static hostfirst_status copy_view_bytes(const struct hostfirst_view *view, void *dst, uint64_t nbytes) {
    hostfirst_status st;
    if (nbytes >= RELEASE_GIL_BYTES) {
        Py_BEGIN_ALLOW_THREADS
        st = hf.view_copy(view, dst, (size_t)nbytes, NULL);
        Py_END_ALLOW_THREADS
    } else {
        st = hf.view_copy(view, dst, (size_t)nbytes, NULL);
    }
    return st;
}

#define BOUND 6

static PyObject *bind(PyObject *self, PyObject *table) {
    (void)self;
    void *fns[BOUND];
    if (!PyTuple_Check(table) || PyTuple_Size(table) != BOUND) {
        PyErr_Format(PyExc_TypeError, "bind() takes a tuple of %d function addresses", BOUND);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < BOUND; i++) {
        fns[i] = PyLong_AsVoidPtr(PyTuple_GetItem(table, i));
        if (fns[i] == NULL) {
            if (!PyErr_Occurred()) PyErr_Format(PyExc_ValueError, "bind(): function %zd is NULL", i);
            return NULL;
        }
    }
    memcpy(&hf.file_view, &fns[0], sizeof fns[0]);
    memcpy(&hf.view_describe, &fns[1], sizeof fns[1]);
    memcpy(&hf.view_copy, &fns[2], sizeof fns[2]);
    memcpy(&hf.view_free, &fns[3], sizeof fns[3]);
    memcpy(&hf.file_tensor_name, &fns[4], sizeof fns[4]);
    memcpy(&hf.view_narrow, &fns[5], sizeof fns[5]);
    bound = 1;
    Py_RETURN_NONE;
}

static int check_bound(void) {
    if (!bound) PyErr_SetString(PyExc_RuntimeError, "hostfirst._native: bind() was not called");
    return bound;
}

/* The numpy dtype of `code` in `dtypes` (borrowed), NULL where it has none (no exception set) or on an error
 * (an exception set). `dtypes` is hostfirst._owned's table, a dict whose __missing__ resolves a code on its first
 * use and stores it (so ml_dtypes is imported only when a bf16 or fp8 tensor is read, never for an f32 one);
 * where numpy has no such dtype it stores nothing (and returns None; a KeyError is taken the same way). */
static PyObject *lookup_dtype(PyObject *dtypes, PyObject *code) {
    PyObject *dtype = PyDict_GetItem(dtypes, code); /* borrowed */
    if (dtype != NULL) return dtype;
    PyObject *got = PyObject_GetItem(dtypes, code); /* calls __missing__ */
    if (got == NULL) {
        if (PyErr_ExceptionMatches(PyExc_KeyError)) PyErr_Clear();
        return NULL;
    }
    Py_DECREF(got);
    return PyDict_GetItem(dtypes, code); /* what __missing__ stored, or NULL */
}

/* The owned numpy array of `view` (numpy.ndarray(shape, dtype, buffer) over a bytearray that hostfirst_view_copy
 * filled, with pread: owned, writable, C-contiguous), Py_None (a new reference) where the caller's Python path
 * must do it (a non-OK status, a dtype not in `dtypes`, a strided view, `limit` bytes or more), NULL with a
 * Python exception (out of memory). The view stays the caller's. */
static PyObject *copy_out(const struct hostfirst_view *view, PyObject *dtypes, PyObject *ndarray,
                          unsigned long long limit) {
    PyObject *result = NULL, *shape = NULL, *buf = NULL, *code = NULL;
    hf_view_info info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    if (hf.view_describe(view, &info) != 0 || info.strides != NULL || info.nbytes >= limit ||
        info.nbytes > (uint64_t)PY_SSIZE_T_MAX)
        goto none;
    code = PyLong_FromUnsignedLong(info.dtype);
    if (code == NULL) goto out;
    PyObject *dtype = lookup_dtype(dtypes, code); /* borrowed */
    if (dtype == NULL) {
        if (PyErr_Occurred()) goto out;
        goto none;
    }
    shape = PyTuple_New((Py_ssize_t)info.rank);
    if (shape == NULL) goto out;
    for (uint32_t d = 0; d < info.rank; d++) {
        PyObject *n = PyLong_FromUnsignedLongLong(info.shape[d]);
        if (n == NULL) goto out;
        PyTuple_SetItem(shape, (Py_ssize_t)d, n); /* steals n */
    }
    buf = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)info.nbytes);
    if (buf == NULL) goto out;
    if (info.nbytes) {
        char *dst = PyByteArray_AsString(buf);
        if (copy_view_bytes(view, dst, info.nbytes) != 0) goto none;
    }
    result = PyObject_CallFunctionObjArgs(ndarray, shape, dtype, buf, NULL);
    goto out;
none:
    result = Py_None;
    Py_INCREF(result);
out:
    Py_XDECREF(code);
    Py_XDECREF(shape);
    Py_XDECREF(buf);
    return result;
}

/* A str as a NUL-terminated UTF-8 name in a new bytes object, or NULL with no exception where it has none
 * (unencodable, an embedded NUL): the caller's Python path raises its own error then. */
static PyObject *utf8_name(PyObject *name_obj, const char **out) {
    PyObject *utf8 = PyUnicode_AsUTF8String(name_obj);
    char *c;
    Py_ssize_t n;
    if (utf8 == NULL || PyBytes_AsStringAndSize(utf8, &c, &n) < 0 || (size_t)n != strlen(c)) {
        PyErr_Clear();
        Py_XDECREF(utf8);
        return NULL;
    }
    *out = c;
    return utf8;
}

/* hostfirst_file_view of `name_obj` in the hostfirst_file* `file_obj` (an int or None): 1 with *out set, 0
 * where the caller answers None (no file, a closed file, a name that is not UTF-8, a non-OK status; the ctypes
 * path then raises what it raises), -1 with a Python error set. */
static int named_view(PyObject *file_obj, PyObject *name_obj, struct hostfirst_view **out) {
    if (file_obj == Py_None) return 0;
    const struct hostfirst_file *file = PyLong_AsVoidPtr(file_obj);
    if (file == NULL) return PyErr_Occurred() ? -1 : 0;
    const char *cname;
    PyObject *utf8 = utf8_name(name_obj, &cname);
    if (utf8 == NULL) return 0;
    hostfirst_status st = hf.file_view(file, cname, out);
    Py_DECREF(utf8);
    return st == 0 ? 1 : 0;
}

/* owned(file, name, dtypes, ndarray, limit) -> numpy array or None: the tensor `name` of the hostfirst_file*
 * `file` (an int) as copy_out gives it; None also for a non-OK status of the lookup. */
static PyObject *owned(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *file_obj, *name_obj, *dtypes, *ndarray;
    unsigned long long limit;
    if (!PyArg_ParseTuple(args, "OUO!OK", &file_obj, &name_obj, &PyDict_Type, &dtypes, &ndarray, &limit))
        return NULL;
    if (!check_bound()) return NULL;
    struct hostfirst_view *view = NULL;
    int found = named_view(file_obj, name_obj, &view);
    if (found < 0) return NULL;
    if (found == 0) Py_RETURN_NONE;
    PyObject *result = copy_out(view, dtypes, ndarray, limit);
    hf.view_free(view);
    return result;
}

/* copy(view, dtypes, ndarray, limit) -> numpy array or None: copy_out of the hostfirst_view* `view` (an int). */
static PyObject *copy(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *view_obj, *dtypes, *ndarray;
    unsigned long long limit;
    if (!PyArg_ParseTuple(args, "OO!OK", &view_obj, &PyDict_Type, &dtypes, &ndarray, &limit)) return NULL;
    if (!check_bound()) return NULL;
    if (view_obj == Py_None) Py_RETURN_NONE;
    const struct hostfirst_view *view = PyLong_AsVoidPtr(view_obj);
    if (view == NULL) {
        if (PyErr_Occurred()) return NULL;
        Py_RETURN_NONE;
    }
    return copy_out(view, dtypes, ndarray, limit);
}

static const char VIEW_CAPSULE[] = "hostfirst._native.view";

static void free_view_capsule(PyObject *capsule) {
    struct hostfirst_view *view = PyCapsule_GetPointer(capsule, VIEW_CAPSULE);
    if (view != NULL) hf.view_free(view);
}

static PyObject *u64_tuple(const uint64_t *v, uint32_t n) {
    PyObject *t = PyTuple_New((Py_ssize_t)n);
    if (t == NULL) return NULL;
    for (uint32_t d = 0; d < n; d++) {
        PyObject *x = PyLong_FromUnsignedLongLong(v[d]);
        if (x == NULL) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SetItem(t, (Py_ssize_t)d, x);
    }
    return t;
}

/* The description of a view this module made, as a tuple (owner, handle, name, dtype, shape, nbytes, data,
 * alignment, strides or None). The owner is a capsule that frees the view when the last reference to it goes
 * (the View object holds it). Takes the view: on failure (None, or NULL with an exception) it is freed. */
static PyObject *describe_taken(struct hostfirst_view *view) {
    hf_view_info info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    if (hf.view_describe(view, &info) != 0) {
        hf.view_free(view);
        Py_RETURN_NONE;
    }
    PyObject *owner = PyCapsule_New(view, VIEW_CAPSULE, free_view_capsule);
    if (owner == NULL) {
        hf.view_free(view);
        return NULL;
    }
    PyObject *shape = u64_tuple(info.shape, info.rank);
    PyObject *strides = info.strides ? u64_tuple(info.strides, info.rank) : (Py_INCREF(Py_None), Py_None);
    const char *n = info.name ? info.name : "";
    PyObject *name = PyUnicode_DecodeUTF8(n, (Py_ssize_t)strlen(n), "replace");
    PyObject *result = NULL;
    if (shape && strides && name)
        result = Py_BuildValue("(ONOKOKNKO)", owner, PyLong_FromVoidPtr(view), name, (unsigned long long)info.dtype,
                               shape, (unsigned long long)info.nbytes, PyLong_FromVoidPtr((void *)info.data),
                               (unsigned long long)info.alignment, strides);
    else
        Py_XDECREF(name);
    Py_DECREF(owner); /* the tuple holds it (or, on failure, it goes and frees the view) */
    Py_XDECREF(shape);
    Py_XDECREF(strides);
    return result;
}

/* view(file, name) -> description tuple (see describe_taken) or None: hostfirst_file_view. */
static PyObject *view(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *file_obj, *name_obj;
    if (!PyArg_ParseTuple(args, "OU", &file_obj, &name_obj)) return NULL;
    if (!check_bound()) return NULL;
    struct hostfirst_view *v = NULL;
    int found = named_view(file_obj, name_obj, &v);
    if (found < 0) return NULL;
    if (found == 0) Py_RETURN_NONE;
    return describe_taken(v);
}

/* narrow(view, dim, start, length) -> description tuple or None: hostfirst_view_narrow. */
static PyObject *narrow(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *view_obj;
    unsigned int dim;
    unsigned long long start, length;
    if (!PyArg_ParseTuple(args, "OIKK", &view_obj, &dim, &start, &length)) return NULL;
    if (!check_bound()) return NULL;
    if (view_obj == Py_None) Py_RETURN_NONE;
    const struct hostfirst_view *from = PyLong_AsVoidPtr(view_obj);
    if (from == NULL) {
        if (PyErr_Occurred()) return NULL;
        Py_RETURN_NONE;
    }
    struct hostfirst_view *v = NULL;
    if (hf.view_narrow(from, dim, start, length, &v) != 0) Py_RETURN_NONE;
    return describe_taken(v);
}

/* names(file, count) -> list of str, the tensor names in file order (decoded as UTF-8 with replacement, as
 * the ctypes path decodes them), or None on a non-OK status. */
static PyObject *names(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *file_obj;
    Py_ssize_t count;
    if (!PyArg_ParseTuple(args, "On", &file_obj, &count)) return NULL;
    if (!check_bound()) return NULL;
    if (file_obj == Py_None) Py_RETURN_NONE;
    const struct hostfirst_file *file = PyLong_AsVoidPtr(file_obj);
    if (file == NULL) {
        if (PyErr_Occurred()) return NULL;
        Py_RETURN_NONE;
    }
    if (count < 0) {
        PyErr_SetString(PyExc_ValueError, "names(): count is negative");
        return NULL;
    }
    PyObject *list = PyList_New(count);
    if (list == NULL) return NULL;
    for (Py_ssize_t i = 0; i < count; i++) {
        const char *p = NULL;
        if (hf.file_tensor_name(file, (size_t)i, &p) != 0) {
            Py_DECREF(list);
            Py_RETURN_NONE;
        }
        PyObject *s = PyUnicode_DecodeUTF8(p ? p : "", p ? (Py_ssize_t)strlen(p) : 0, "replace");
        if (s == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SetItem(list, i, s); /* steals s */
    }
    return list;
}

/* index(view, key, dtypes, ndarray, limit) -> numpy array or None: `get_slice(name)[key]` of the hostfirst_view*
 * `view` (an int) for the common indices: an int, a slice of step 1 (or of any step selecting at most one
 * element), `...`, or a tuple of them. It narrows the view (hostfirst_view_narrow, once per dimension the index
 * restricts, in dimension order, as View._select does), copies the narrowed view's packed bytes as copy_out
 * does, and drops the dimensions an int indexed (every one indexed by ints: a 0-d array). None for everything
 * else, and for anything out of range (steps, lists, None, bools, numpy scalars, two ellipses, too many indices,
 * an int out of range, a non-OK status, a dtype not in `dtypes`, `limit` bytes or more): the caller's Python
 * path (View._select) then gives the same array or raises what it always raised. */
#define MAX_RANK 64
static PyObject *index_copy(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *view_obj, *key, *dtypes, *ndarray;
    unsigned long long limit;
    if (!PyArg_ParseTuple(args, "OOO!OK", &view_obj, &key, &PyDict_Type, &dtypes, &ndarray, &limit)) return NULL;
    if (!check_bound()) return NULL;
    if (view_obj == Py_None) Py_RETURN_NONE;
    const struct hostfirst_view *from = PyLong_AsVoidPtr(view_obj);
    if (from == NULL) {
        if (PyErr_Occurred()) return NULL;
        Py_RETURN_NONE;
    }
    hf_view_info info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    if (hf.view_describe(from, &info) != 0 || info.rank > MAX_RANK) Py_RETURN_NONE;
    uint32_t rank = info.rank;
    uint64_t size[MAX_RANK], start[MAX_RANK], length[MAX_RANK];
    int dropped[MAX_RANK];
    for (uint32_t d = 0; d < rank; d++) {
        size[d] = info.shape[d];
        start[d] = 0;
        length[d] = size[d];
        dropped[d] = 0;
    }
    int is_tuple = PyTuple_Check(key);
    Py_ssize_t n = is_tuple ? PyTuple_Size(key) : 1;
    Py_ssize_t ellipsis_at = -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *k = is_tuple ? PyTuple_GetItem(key, i) : key;
        if (k == Py_Ellipsis) {
            if (ellipsis_at >= 0) Py_RETURN_NONE; /* two ellipses: Python raises */
            ellipsis_at = i;
        }
    }
    Py_ssize_t indexed = n - (ellipsis_at >= 0);
    if (indexed > (Py_ssize_t)rank) Py_RETURN_NONE; /* too many indices: Python raises */
    uint32_t dim = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *k = is_tuple ? PyTuple_GetItem(key, i) : key;
        if (k == Py_Ellipsis) {
            dim += (uint32_t)((Py_ssize_t)rank - indexed);
            continue;
        }
        Py_ssize_t len = (Py_ssize_t)size[dim];
        if (size[dim] > (uint64_t)PY_SSIZE_T_MAX) Py_RETURN_NONE;
        if (PySlice_Check(k)) {
            Py_ssize_t a, b, step;
            if (PySlice_Unpack(k, &a, &b, &step) < 0) {
                PyErr_Clear(); /* a slice of non-ints: Python raises its own error */
                Py_RETURN_NONE;
            }
            Py_ssize_t count = PySlice_AdjustIndices(len, &a, &b, step);
            if (count > 1 && step != 1) Py_RETURN_NONE; /* numpy takes every step-th element: Python path */
            start[dim] = count ? (uint64_t)a : 0;
            length[dim] = (uint64_t)count;
        } else if (PyLong_CheckExact(k)) {
            int overflow = 0;
            long long v = PyLong_AsLongLongAndOverflow(k, &overflow);
            if (overflow || (v == -1 && PyErr_Occurred())) {
                PyErr_Clear();
                Py_RETURN_NONE;
            }
            if (v < -(long long)len || v >= (long long)len) Py_RETURN_NONE; /* out of range: Python raises */
            start[dim] = (uint64_t)(v < 0 ? v + (long long)len : v);
            length[dim] = 1;
            dropped[dim] = 1;
        } else {
            Py_RETURN_NONE; /* bool, None, lists, numpy scalars, anything else: Python path */
        }
        dim++;
    }
    /* narrow, in dimension order, each dimension the index restricts */
    struct hostfirst_view *cur = NULL;
    for (uint32_t d = 0; d < rank; d++) {
        if (start[d] == 0 && length[d] == size[d]) continue;
        struct hostfirst_view *next = NULL;
        hostfirst_status st = hf.view_narrow(cur ? cur : from, d, start[d], length[d], &next);
        if (cur) hf.view_free(cur);
        if (st != 0) Py_RETURN_NONE;
        cur = next;
    }
    const struct hostfirst_view *src = cur ? cur : from;
    PyObject *result = NULL, *shape = NULL, *buf = NULL, *code = NULL;
    uint64_t nbytes = 0;
    if (cur) {
        memset(&info, 0, sizeof info);
        info.struct_size = sizeof info;
        if (hf.view_describe(cur, &info) != 0) goto none;
    }
    nbytes = info.nbytes;
    if (nbytes >= limit || nbytes > (uint64_t)PY_SSIZE_T_MAX) goto none;
    code = PyLong_FromUnsignedLong(info.dtype);
    if (code == NULL) goto out;
    PyObject *dtype = lookup_dtype(dtypes, code); /* borrowed */
    if (dtype == NULL) {
        if (PyErr_Occurred()) goto out;
        goto none;
    }
    Py_ssize_t kept = 0;
    for (uint32_t d = 0; d < rank; d++) kept += !dropped[d];
    shape = PyTuple_New(kept);
    if (shape == NULL) goto out;
    for (uint32_t d = 0, at = 0; d < rank; d++) {
        if (dropped[d]) continue;
        PyObject *x = PyLong_FromUnsignedLongLong(length[d]);
        if (x == NULL) goto out;
        PyTuple_SetItem(shape, (Py_ssize_t)at++, x); /* steals x */
    }
    buf = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)nbytes);
    if (buf == NULL) goto out;
    if (nbytes) {
        char *dst = PyByteArray_AsString(buf);
        if (copy_view_bytes(src, dst, nbytes) != 0) goto none;
    }
    result = PyObject_CallFunctionObjArgs(ndarray, shape, dtype, buf, NULL);
    goto out;
none:
    result = Py_None;
    Py_INCREF(result);
out:
    if (cur) hf.view_free(cur);
    Py_XDECREF(code);
    Py_XDECREF(shape);
    Py_XDECREF(buf);
    return result;
}

static PyObject *view_info_size(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    return PyLong_FromSize_t(sizeof(hf_view_info));
}

static PyMethodDef methods[] = {
    {"bind", bind, METH_O, "bind(addresses): the hostfirst_* functions this module calls, from ctypes."},
    {"owned", owned, METH_VARARGS, "owned(file, name, dtypes, ndarray, limit): a tensor as an owned array."},
    {"names", names, METH_VARARGS, "names(file, count): the tensor names in file order."},
    {"copy", copy, METH_VARARGS, "copy(view, dtypes, ndarray, limit): a view as an owned array."},
    {"view", view, METH_VARARGS, "view(file, name): a new view's owner and description."},
    {"narrow", narrow, METH_VARARGS, "narrow(view, dim, start, length): a narrowed view's owner and description."},
    {"index", index_copy, METH_VARARGS, "index(view, key, dtypes, ndarray, limit): view[key] as an owned array."},
    {"view_info_size", view_info_size, METH_NOARGS, "sizeof the hostfirst_view_info mirror."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_native", "hostfirst's native skin over the C ABI (see _fast.py).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__native(void) {
    (void)prototypes_match;
    return PyModule_Create(&module);
}
