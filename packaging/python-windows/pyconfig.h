/* pyconfig.h for cross-building hostfirst's abi3 extension (bindings/python/hostfirst/_native.c) for 64-bit
 * Windows with mingw-w64 (scripts/build-python-native.sh --windows). A Windows CPython's own pyconfig.h is not on
 * the build machine; the Linux interpreter's headers are used with this file in place of theirs. It states only
 * the facts the limited API's headers read: the platform (MS_WINDOWS, 64-bit), that the interpreter is a DLL
 * whose API is imported (__declspec(dllimport); the import library for python3.dll is made from the symbols the
 * object file needs), and the LLP64 type sizes. */
#ifndef HOSTFIRST_WINDOWS_PYCONFIG_H
#define HOSTFIRST_WINDOWS_PYCONFIG_H

#include <stdint.h>
#include <limits.h>

#define MS_WIN32
#define MS_WIN64
#define MS_WINDOWS
#define NT_THREADS
#define WITH_THREAD
#define Py_ENABLE_SHARED 1
#define HAVE_DECLSPEC_DLL
#define Py_NO_ENABLE_SHARED_UNUSED

/* LLP64: long is 32 bits */
#define SIZEOF_SHORT 2
#define SIZEOF_INT 4
#define SIZEOF_LONG 4
#define SIZEOF_LONG_LONG 8
#define SIZEOF_FLOAT 4
#define SIZEOF_DOUBLE 8
#define SIZEOF_VOID_P 8
#define SIZEOF_SIZE_T 8
#define SIZEOF_TIME_T 8
#define SIZEOF_OFF_T 4
#define SIZEOF_FPOS_T 8
#define SIZEOF_WCHAR_T 2
#define SIZEOF__BOOL 1
#define SIZEOF_HKEY 8
#define ALIGNOF_LONG 4
#define ALIGNOF_SIZE_T 8

typedef long long Py_ssize_t;
#define HAVE_PY_SSIZE_T 1
#define PY_SSIZE_T_MAX LLONG_MAX

#define HAVE_WCHAR_H 1
#define HAVE_STDARG_PROTOTYPES 1
#define HAVE_LONG_LONG 1
#define PY_LONG_LONG long long
#define PY_LLONG_MIN LLONG_MIN
#define PY_LLONG_MAX LLONG_MAX
#define PY_ULLONG_MAX ULLONG_MAX
#define DOUBLE_IS_LITTLE_ENDIAN_IEEE754 1
#define PY_FORMAT_SIZE_T "I64"

#endif
