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
 * lists a file's tensor names in one. Any status other than OK makes it return None having changed nothing
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
} hf;

/* The pointers' types are the header's prototypes (-Werror refuses distinct pointer types); sizeof evaluates
 * nothing, so no symbol of the library is referenced. */
static void prototypes_match(void) {
    (void)sizeof(hf.file_view == &hostfirst_file_view);
    (void)sizeof(hf.view_describe == &hostfirst_view_describe);
    (void)sizeof(hf.view_copy == &hostfirst_view_copy);
    (void)sizeof(hf.view_free == &hostfirst_view_free);
    (void)sizeof(hf.file_tensor_name == &hostfirst_file_tensor_name);
}
static int bound = 0;

/* Copies above this size let other Python threads run meanwhile. */
#define RELEASE_GIL_BYTES (1u << 20)

static PyObject *bind(PyObject *self, PyObject *table) {
    (void)self;
    void *fns[5];
    if (!PyTuple_Check(table) || PyTuple_Size(table) != 5) {
        PyErr_SetString(PyExc_TypeError, "bind() takes a tuple of 5 function addresses");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < 5; i++) {
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
    bound = 1;
    Py_RETURN_NONE;
}

static int check_bound(void) {
    if (!bound) PyErr_SetString(PyExc_RuntimeError, "hostfirst._native: bind() was not called");
    return bound;
}

/* owned(file, name, dtypes, ndarray, limit) -> numpy array or None.
 * file: the hostfirst_file* (int); name: str; dtypes: {dtype code: numpy dtype}; ndarray: numpy.ndarray;
 * limit: the size from which the caller copies with reader threads instead (None is returned at and above it).
 * The array is numpy.ndarray(shape, dtype, buffer) over a bytearray that hostfirst_view_copy filled (pread):
 * owned, writable, C-contiguous. None: a non-OK status, a dtype not in `dtypes`, a strided or large view. */
static PyObject *owned(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *file_obj, *name_obj, *dtypes, *ndarray;
    unsigned long long limit;
    if (!PyArg_ParseTuple(args, "OUO!OK", &file_obj, &name_obj, &PyDict_Type, &dtypes, &ndarray, &limit))
        return NULL;
    if (!check_bound()) return NULL;
    const struct hostfirst_file *file = PyLong_AsVoidPtr(file_obj);
    if (file == NULL) {
        if (PyErr_Occurred()) return NULL;
        Py_RETURN_NONE; /* a closed file: the ctypes path raises */
    }
    PyObject *utf8 = PyUnicode_AsUTF8String(name_obj);
    if (utf8 == NULL) {
        PyErr_Clear(); /* unencodable: the ctypes path raises its own error */
        Py_RETURN_NONE;
    }
    char *cname;
    Py_ssize_t clen;
    if (PyBytes_AsStringAndSize(utf8, &cname, &clen) < 0 || (size_t)clen != strlen(cname)) {
        PyErr_Clear(); /* an embedded NUL */
        Py_DECREF(utf8);
        Py_RETURN_NONE;
    }
    struct hostfirst_view *view = NULL;
    hostfirst_status st = hf.file_view(file, cname, &view);
    Py_DECREF(utf8);
    if (st != 0) Py_RETURN_NONE;

    PyObject *result = NULL, *shape = NULL, *buf = NULL, *code = NULL;
    hf_view_info info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    if (hf.view_describe(view, &info) != 0 || info.strides != NULL || info.nbytes >= limit ||
        info.nbytes > (uint64_t)PY_SSIZE_T_MAX)
        goto none;
    code = PyLong_FromUnsignedLong(info.dtype);
    if (code == NULL) goto out;
    PyObject *dtype = PyDict_GetItem(dtypes, code); /* borrowed */
    if (dtype == NULL) goto none;
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
        if (info.nbytes >= RELEASE_GIL_BYTES) {
            Py_BEGIN_ALLOW_THREADS
            st = hf.view_copy(view, dst, (size_t)info.nbytes, NULL);
            Py_END_ALLOW_THREADS
        } else {
            st = hf.view_copy(view, dst, (size_t)info.nbytes, NULL);
        }
        if (st != 0) goto none;
    }
    result = PyObject_CallFunctionObjArgs(ndarray, shape, dtype, buf, NULL);
    goto out;
none:
    result = Py_None;
    Py_INCREF(result);
out:
    hf.view_free(view);
    Py_XDECREF(code);
    Py_XDECREF(shape);
    Py_XDECREF(buf);
    return result;
}

/* names(file, count) -> list of str, the tensor names in file order (decoded as UTF-8 with replacement, as
 * the ctypes path decodes them), or None on a non-OK status. */
static PyObject *names(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *file_obj;
    Py_ssize_t count;
    if (!PyArg_ParseTuple(args, "On", &file_obj, &count)) return NULL;
    if (!check_bound()) return NULL;
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

static PyObject *view_info_size(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    return PyLong_FromSize_t(sizeof(hf_view_info));
}

static PyMethodDef methods[] = {
    {"bind", bind, METH_O, "bind(addresses): the hostfirst_* functions this module calls, from ctypes."},
    {"owned", owned, METH_VARARGS, "owned(file, name, dtypes, ndarray, limit): a tensor as an owned array."},
    {"names", names, METH_VARARGS, "names(file, count): the tensor names in file order."},
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
