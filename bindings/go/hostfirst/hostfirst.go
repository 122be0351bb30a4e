// Package hostfirst is a Go binding of every stable function of libhostfirst's C API (cgo): the device
// census, the default device and strict mode, safetensors and token files and their tensor views, reads,
// puts, rules, plans and loads, batch gathers and streams, DLPack exports, the safetensors writer, and the
// library's status codes and messages as Go errors. The experimental tier is left out.
//
// Its import path is github.com/hostfirst/hostfirst/bindings/go/hostfirst: the package hostfirst in the module
// github.com/hostfirst/hostfirst/bindings/go (the directory bindings/go of the hostfirst repository; releases are
// tagged bindings/go/vX.Y.Z), so
//
//	go get github.com/hostfirst/hostfirst/bindings/go/hostfirst@latest
//	import "github.com/hostfirst/hostfirst/bindings/go/hostfirst"
//
// It builds against an installed hostfirst (scripts/install.sh or cargo cinstall), found with pkg-config:
//
//	PKG_CONFIG_PATH=<prefix>/lib/pkgconfig CGO_ENABLED=1 go build
//
// and needs the library at run time (its SONAME on the loader's path, or LD_LIBRARY_PATH=<prefix>/lib).
//
// Versions follow the C header's one rule, HOSTFIRST_VERSION_COMPATIBLE (the same ABI line, the library at least
// as new as the header): the build fails when the installed hostfirst.h cannot serve this package (it is written
// for hostfirst 1.1.0: WrittenFor), and CheckVersion (also run by the entry points: Open, Backends, Devices,
// ParseDevice, HandleCount) fails when the library the program runs with cannot serve the header it was built
// against.
//
// Errors: the C library keeps the message (and a fit check's numbers) of a failed call per OS thread, and a
// goroutine may move between threads between two cgo calls. So each call goes through a C shim that makes the
// call and, on failure, copies them in the same cgo call (the same thread; hf_go_error.h). A failed call returns
// an *Error; errors.Is(err, StatusNotFound) finds its status through any wrapping (a Status is an error too).
//
// Handles: the library's handles are ids (a freed or stale one gives INVALID_HANDLE, never a crash), not
// addresses, so Go keeps them as uintptr and the shims cast them: a small integer held as a Go pointer would
// be reported as a bad pointer by Go's garbage collector.
//
// Lifetimes: File, View and Buffer own one library handle each. Close releases it (a second Close does nothing);
// a finalizer closes what is forgotten. A View keeps its File open and a Buffer keeps its View.
package hostfirst

/*
#cgo pkg-config: hostfirst
#include <stdlib.h>
#include <string.h>
#include <hostfirst.h>
#include "hf_go_error.h"

// The oldest hostfirst this package is written for (its HOSTFIRST_VERSION_NUMBER): 1.1.0.
#define HF_GO_WRITTEN_FOR 1001000
#if !HOSTFIRST_VERSION_COMPATIBLE(HF_GO_WRITTEN_FOR, HOSTFIRST_VERSION_NUMBER)
#error "the installed hostfirst.h cannot serve this Go package (written for hostfirst 1.1.0): HOSTFIRST_VERSION_COMPATIBLE"
#endif

// The one version rule of the header, for Go.
static int hf_go_version_compatible(uint32_t header, uint32_t library) {
	return HOSTFIRST_VERSION_COMPATIBLE(header, library);
}


static hostfirst_status hf_go_backend(size_t i, hostfirst_backend_info *out, hf_go_error **err) {
	out->struct_size = sizeof *out;
	hostfirst_status st = hostfirst_backend_describe(i, out);
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_devices(hostfirst_device *out, size_t cap, size_t *count, hf_go_error **err) {
	hostfirst_status st = hostfirst_devices(out, cap, count);
	*err = st == HOSTFIRST_STATUS_BUFFER_TOO_SMALL ? NULL : hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_device_parse(const char *spec, hostfirst_device *out, hf_go_error **err) {
	hostfirst_status st = hostfirst_device_parse(spec, out);
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_file_open(const char *path, uintptr_t *out, hf_go_error **err) {
	hostfirst_file *f = NULL;
	hostfirst_status st = hostfirst_file_open(path, &f);
	if (st == HOSTFIRST_STATUS_OK) *out = (uintptr_t)f;
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_file_free(uintptr_t f, hf_go_error **err) {
	hostfirst_status st = hostfirst_file_free((hostfirst_file *)f);
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_tensor_count(uintptr_t f, size_t *out, hf_go_error **err) {
	hostfirst_status st = hostfirst_file_tensor_count((const hostfirst_file *)f, out);
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_tensor_name(uintptr_t f, size_t i, const char **out, hf_go_error **err) {
	hostfirst_status st = hostfirst_file_tensor_name((const hostfirst_file *)f, i, out);
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_file_view(uintptr_t f, const char *name, uintptr_t *out, hf_go_error **err) {
	hostfirst_view *v = NULL;
	hostfirst_status st = hostfirst_file_view((const hostfirst_file *)f, name, &v);
	if (st == HOSTFIRST_STATUS_OK) *out = (uintptr_t)v;
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_view_free(uintptr_t v, hf_go_error **err) {
	hostfirst_status st = hostfirst_view_free((hostfirst_view *)v);
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_view_describe(uintptr_t v, hostfirst_view_info *out, hf_go_error **err) {
	out->struct_size = sizeof *out;
	hostfirst_status st = hostfirst_view_describe((const hostfirst_view *)v, out);
	*err = hf_go_error_take(st);
	return st;
}

// io.ReaderAt's read: the bytes of [off, off + len) that the tensor has (none at or past its end) into dst; their
// number in *n.
static hostfirst_status hf_go_view_read_at(uintptr_t v, uint64_t off, void *dst, size_t len, size_t *n,
                                           hf_go_error **err) {
	hostfirst_view_info info;
	info.struct_size = sizeof info;
	hostfirst_status st = hostfirst_view_describe((const hostfirst_view *)v, &info);
	size_t have = 0;
	if (st == HOSTFIRST_STATUS_OK && off < info.nbytes) have = info.nbytes - off < len ? (size_t)(info.nbytes - off) : len;
	if (st == HOSTFIRST_STATUS_OK && have > 0) st = hostfirst_view_read((const hostfirst_view *)v, off, dst, have);
	if (st == HOSTFIRST_STATUS_OK) *n = have;
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_put(uintptr_t v, hostfirst_device target, uintptr_t *out, hf_go_error **err) {
	hostfirst_buffer *b = NULL;
	hostfirst_status st = hostfirst_put((const hostfirst_view *)v, &target, NULL, &b, NULL);
	if (st == HOSTFIRST_STATUS_OK) *out = (uintptr_t)b;
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_buffer_free(uintptr_t b, hf_go_error **err) {
	hostfirst_status st = hostfirst_buffer_free((hostfirst_buffer *)b);
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_buffer_describe(uintptr_t b, hostfirst_buffer_info *out, hf_go_error **err) {
	out->struct_size = sizeof *out;
	hostfirst_status st = hostfirst_buffer_describe((const hostfirst_buffer *)b, out);
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_buffer_copy(uintptr_t b, void *dst, size_t cap, hf_go_error **err) {
	hostfirst_status st = hostfirst_buffer_copy_to_host((const hostfirst_buffer *)b, dst, cap);
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_handle_count(size_t *out, hf_go_error **err) {
	hostfirst_status st = hostfirst_handle_count(out);
	*err = hf_go_error_take(st);
	return st;
}
*/
import "C"

import (
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync"
	"unsafe"
)

// Error is a failed call: its status and the library's message, which names the thing (file, tensor,
// device) and the numbers. errors.Is(err, s) holds for an *Error whose Status is s.
type Error struct {
	Status  Status
	Message string
	Fit     *Fit // the numbers of a fit check that refused the call (StatusOutOfMemory before allocating), or nil
}

// Fit is what a fit check found: bytes needed, free and total on the device.
type Fit struct {
	Needed, Free, Total uint64
	Device              Device
}

func (e *Error) Error() string { return fmt.Sprintf("hostfirst: %s: %s", e.Status, e.Message) }

// Is reports whether target is e's Status, for errors.Is(err, hostfirst.StatusNotFound).
func (e *Error) Is(target error) bool {
	s, ok := target.(Status)
	return ok && s == e.Status
}

// ErrClosed is returned by methods of a File, View or Buffer after its Close.
var ErrClosed = errors.New("hostfirst: use after Close")

// check turns a shim's status and its copy of the failure (message and fit numbers, hf_go_error_take) into an
// error (nil on success) and frees the copy.
func check(st C.hostfirst_status, failure *C.hf_go_error) error {
	if failure != nil {
		defer C.hf_go_error_free(failure)
	}
	if st == C.HOSTFIRST_STATUS_OK {
		return nil
	}
	err := &Error{Status: Status(st)}
	if failure != nil {
		if failure.message != nil {
			err.Message = C.GoString(failure.message)
		}
		if failure.has_fit != 0 {
			f := &failure.fit
			err.Fit = &Fit{Needed: uint64(f.needed), Free: uint64(f.free), Total: uint64(f.total),
				Device: Device{Kind: int32(f.device.kind), Ordinal: int32(f.device.ordinal)}}
		}
	}
	return err
}

// Version is the library's version string, such as "1.0.0".
func Version() string { return C.GoString(C.hostfirst_version()) }

// VersionNumber is the library's MAJOR*1000000 + MINOR*1000 + PATCH.
func VersionNumber() uint32 { return uint32(C.hostfirst_version_number()) }

// HeaderVersionNumber is the same number for the header this package was compiled against.
const HeaderVersionNumber uint32 = C.HOSTFIRST_VERSION_NUMBER

// WrittenFor is the oldest hostfirst version (a version number) whose header this package builds against.
const WrittenFor uint32 = C.HF_GO_WRITTEN_FOR

// versionCompatible is the header's HOSTFIRST_VERSION_COMPATIBLE(header, library).
func versionCompatible(header, library uint32) bool {
	return C.hf_go_version_compatible(C.uint32_t(header), C.uint32_t(library)) != 0
}

// versionErr is CheckVersion's answer, taken once.
var versionErr = checkVersion()

func checkVersion() error {
	if versionCompatible(HeaderVersionNumber, VersionNumber()) {
		return nil
	}
	return &Error{Status: StatusUnsupported, Message: fmt.Sprintf(
		"libhostfirst %s (%d) cannot serve a program built against hostfirst.h %d (HOSTFIRST_VERSION_COMPATIBLE: "+
			"the same ABI line, the library at least as new as the header)", Version(), VersionNumber(), HeaderVersionNumber)}
}

// CheckVersion reports whether the library the program runs with serves the header it was built against
// (HOSTFIRST_VERSION_COMPATIBLE); an *Error with StatusUnsupported when not. The entry points return the same
// error.
func CheckVersion() error { return versionErr }

// Backend is one entry of the device census (cpu, cuda, ...).
type Backend struct {
	Name          string
	Status        string // "available", "library_not_found", ...
	Available     bool
	Reason        string
	DriverVersion string
	DeviceCount   int
}

// Backends lists the census: every backend the library knows, available or not, and why.
func Backends() ([]Backend, error) {
	if versionErr != nil {
		return nil, versionErr
	}
	n := int(C.hostfirst_backend_count())
	out := make([]Backend, 0, n)
	for i := 0; i < n; i++ {
		var info C.hostfirst_backend_info
		var msg *C.hf_go_error
		if err := check(C.hf_go_backend(C.size_t(i), &info, &msg), msg); err != nil {
			return nil, err
		}
		out = append(out, Backend{
			Name:          C.GoString(info.name),
			Status:        strings.ToLower(C.GoString(C.hostfirst_backend_status_name(info.status))),
			Available:     info.status == C.HOSTFIRST_BACKEND_STATUS_AVAILABLE,
			Reason:        C.GoString(info.reason),
			DriverVersion: C.GoString(info.driver_version),
			DeviceCount:   int(info.device_count),
		})
	}
	return out, nil
}

// Device names one device: a kind (a hostfirst_device_kind: 1 cpu, 2 cuda, 3 cuda_host) and an ordinal.
type Device struct {
	Kind    int32
	Ordinal int32
}

func (d Device) c() C.hostfirst_device {
	return C.hostfirst_device{kind: C.hostfirst_device_kind(d.Kind), ordinal: C.int32_t(d.Ordinal)}
}

// IsCPU reports whether d is the host.
func (d Device) IsCPU() bool { return d.Kind == C.HOSTFIRST_DEVICE_CPU }

// ParseDevice parses a device spec such as "cpu" or "cuda:1".
func ParseDevice(spec string) (Device, error) {
	if versionErr != nil {
		return Device{}, versionErr
	}
	cs := C.CString(spec)
	defer C.free(unsafe.Pointer(cs))
	var d C.hostfirst_device
	var msg *C.hf_go_error
	if err := check(C.hf_go_device_parse(cs, &d, &msg), msg); err != nil {
		return Device{}, err
	}
	return Device{Kind: int32(d.kind), Ordinal: int32(d.ordinal)}, nil
}

// Devices lists every device the census found (the host first).
func Devices() ([]Device, error) {
	if versionErr != nil {
		return nil, versionErr
	}
	var count C.size_t
	var msg *C.hf_go_error
	if st := C.hf_go_devices(nil, 0, &count, &msg); st != C.HOSTFIRST_STATUS_BUFFER_TOO_SMALL {
		if err := check(st, msg); err != nil {
			return nil, err
		}
	}
	if count == 0 {
		return nil, nil
	}
	buf := make([]C.hostfirst_device, count)
	if err := check(C.hf_go_devices(&buf[0], count, &count, &msg), msg); err != nil {
		return nil, err
	}
	out := make([]Device, 0, count)
	for _, d := range buf[:count] {
		out = append(out, Device{Kind: int32(d.kind), Ordinal: int32(d.ordinal)})
	}
	return out, nil
}

// HandleCount is the number of live library handles in the process (files, views, buffers, ...).
func HandleCount() (int, error) {
	if versionErr != nil {
		return 0, versionErr
	}
	var n C.size_t
	var msg *C.hf_go_error
	if err := check(C.hf_go_handle_count(&n, &msg), msg); err != nil {
		return 0, err
	}
	return int(n), nil
}

// handle is what File, View and Buffer share: one C handle, released once.
type handle struct {
	mu sync.Mutex
	id C.uintptr_t // 0: closed
}

func (h *handle) get() (C.uintptr_t, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.id == 0 {
		return 0, ErrClosed
	}
	return h.id, nil
}

// release frees the handle with free (once); later calls return nil.
func (h *handle) release(free func(C.uintptr_t) error) error {
	h.mu.Lock()
	id := h.id
	h.id = 0
	h.mu.Unlock()
	if id == 0 {
		return nil
	}
	return free(id)
}

// File is an open safetensors file (or sharded set): its header is parsed, its data stays on disk, mapped.
type File struct {
	h   handle
	mem *cmem // OpenMemory's copy of the image, freed after the file and its views (see cmem)
}

// cmem is C memory that library handles point into. It is freed by its finalizer, once nothing refers to it:
// a File refers to it and every View to its File, so Go's finalizer order (a referring object's finalizer
// first) frees it only after the views' and the file's handles are gone.
type cmem struct{ p unsafe.Pointer }

func newCmem(p unsafe.Pointer) *cmem {
	m := &cmem{p: p}
	runtime.SetFinalizer(m, func(m *cmem) { C.free(m.p) })
	return m
}

// Open opens a .safetensors file or a *.safetensors.index.json; only the header is read.
func Open(path string) (*File, error) {
	if versionErr != nil {
		return nil, versionErr
	}
	cs := C.CString(path)
	defer C.free(unsafe.Pointer(cs))
	var id C.uintptr_t
	var msg *C.hf_go_error
	if err := check(C.hf_go_file_open(cs, &id, &msg), msg); err != nil {
		return nil, err
	}
	file := &File{h: handle{id: id}}
	runtime.SetFinalizer(file, (*File).Close)
	return file, nil
}

// Close releases the file. Views taken from it keep it alive until they are closed too.
func (f *File) Close() error {
	runtime.SetFinalizer(f, nil)
	return f.h.release(func(id C.uintptr_t) error {
		var msg *C.hf_go_error
		return check(C.hf_go_file_free(id, &msg), msg)
	})
}

// TensorNames lists the tensors in the file's order.
func (f *File) TensorNames() ([]string, error) {
	p, err := f.h.get()
	if err != nil {
		return nil, err
	}
	defer runtime.KeepAlive(f)
	var n C.size_t
	var msg *C.hf_go_error
	if err := check(C.hf_go_tensor_count(p, &n, &msg), msg); err != nil {
		return nil, err
	}
	names := make([]string, 0, n)
	for i := C.size_t(0); i < n; i++ {
		var name *C.char
		if err := check(C.hf_go_tensor_name(p, i, &name, &msg), msg); err != nil {
			return nil, err
		}
		names = append(names, C.GoString(name))
	}
	return names, nil
}

// View is one tensor of a file: zero-copy, read-only, never changed under its holder.
type View struct {
	h    handle
	file *File // kept reachable: the library keeps the file open for the view anyway, this keeps Go's side too
}

// View returns the tensor called name.
func (f *File) View(name string) (*View, error) {
	p, err := f.h.get()
	if err != nil {
		return nil, err
	}
	defer runtime.KeepAlive(f)
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	var id C.uintptr_t
	var msg *C.hf_go_error
	if err := check(C.hf_go_file_view(p, cs, &id, &msg), msg); err != nil {
		return nil, err
	}
	view := &View{h: handle{id: id}, file: f}
	runtime.SetFinalizer(view, (*View).Close)
	return view, nil
}

// Close releases the view.
func (v *View) Close() error {
	runtime.SetFinalizer(v, nil)
	return v.h.release(func(id C.uintptr_t) error {
		var msg *C.hf_go_error
		return check(C.hf_go_view_free(id, &msg), msg)
	})
}

// TensorInfo describes a view or a buffer.
type TensorInfo struct {
	Name       string
	DType      uint32 // a hostfirst_dtype value
	DTypeName  string // "U16", "F32", ...
	Shape      []uint64
	NBytes     uint64
	FileOffset uint64 // views only: where the data starts in the file
}

func shape(p *C.uint64_t, rank C.uint32_t) []uint64 {
	if rank == 0 || p == nil {
		return []uint64{}
	}
	dims := unsafe.Slice((*uint64)(unsafe.Pointer(p)), int(rank))
	return append([]uint64(nil), dims...)
}

// Info describes the tensor.
func (v *View) Info() (TensorInfo, error) {
	p, err := v.h.get()
	if err != nil {
		return TensorInfo{}, err
	}
	defer runtime.KeepAlive(v)
	var info C.hostfirst_view_info
	var msg *C.hf_go_error
	if err := check(C.hf_go_view_describe(p, &info, &msg), msg); err != nil {
		return TensorInfo{}, err
	}
	return TensorInfo{
		Name:       C.GoString(info.name),
		DType:      uint32(info.dtype),
		DTypeName:  C.GoString(C.hostfirst_dtype_name(info.dtype)),
		Shape:      shape(info.shape, info.rank),
		NBytes:     uint64(info.nbytes),
		FileOffset: uint64(info.file_offset),
	}, nil
}

// ReadAt copies the tensor's data from byte off into dst, as io.ReaderAt says: len(dst) bytes and a nil error
// where the data has them; where it ends first, the bytes there are (none at or past the end) and io.EOF. A
// negative offset is an *Error with StatusOutOfRange.
func (v *View) ReadAt(dst []byte, off int64) (int, error) {
	p, err := v.h.get()
	if err != nil {
		return 0, err
	}
	defer runtime.KeepAlive(v)
	if off < 0 {
		return 0, &Error{Status: StatusOutOfRange, Message: fmt.Sprintf("negative offset %d", off)}
	}
	var ptr unsafe.Pointer
	if len(dst) > 0 {
		ptr = unsafe.Pointer(&dst[0]) // Go memory without Go pointers, not kept by C after the call
	}
	var n C.size_t
	var msg *C.hf_go_error
	if err := check(C.hf_go_view_read_at(p, C.uint64_t(off), ptr, C.size_t(len(dst)), &n, &msg), msg); err != nil {
		return 0, err
	}
	if int(n) < len(dst) {
		return int(n), io.EOF
	}
	return int(n), nil
}

// Buffer is a tensor placed on a device by Put: an owned copy (or copy-on-write mapping) of its bytes.
type Buffer struct {
	h    handle
	view *View
}

// Put places the tensor on device (for example the result of ParseDevice("cpu")) with default options. A put
// refused by the fit check (StatusOutOfMemory before allocating) carries the numbers in the *Error's Fit (as
// every call the fit check refuses does).
func (v *View) Put(device Device) (*Buffer, error) {
	p, err := v.h.get()
	if err != nil {
		return nil, err
	}
	defer runtime.KeepAlive(v)
	var id C.uintptr_t
	var msg *C.hf_go_error
	if err := check(C.hf_go_put(p, device.c(), &id, &msg), msg); err != nil {
		return nil, err
	}
	buf := &Buffer{h: handle{id: id}, view: v}
	runtime.SetFinalizer(buf, (*Buffer).Close)
	return buf, nil
}

// Close releases the buffer (and its device memory).
func (b *Buffer) Close() error {
	runtime.SetFinalizer(b, nil)
	return b.h.release(func(id C.uintptr_t) error {
		var msg *C.hf_go_error
		return check(C.hf_go_buffer_free(id, &msg), msg)
	})
}

// Device is where the buffer lives.
func (b *Buffer) Device() (Device, error) {
	p, err := b.h.get()
	if err != nil {
		return Device{}, err
	}
	defer runtime.KeepAlive(b)
	var info C.hostfirst_buffer_info
	var msg *C.hf_go_error
	if err := check(C.hf_go_buffer_describe(p, &info, &msg), msg); err != nil {
		return Device{}, err
	}
	return Device{Kind: int32(info.device.kind), Ordinal: int32(info.device.ordinal)}, nil
}

// Bytes copies the buffer's contents to Go memory (from any device).
func (b *Buffer) Bytes() ([]byte, error) {
	p, err := b.h.get()
	if err != nil {
		return nil, err
	}
	defer runtime.KeepAlive(b)
	var info C.hostfirst_buffer_info
	var msg *C.hf_go_error
	if err := check(C.hf_go_buffer_describe(p, &info, &msg), msg); err != nil {
		return nil, err
	}
	out := make([]byte, int(info.nbytes))
	var ptr unsafe.Pointer
	if len(out) > 0 {
		ptr = unsafe.Pointer(&out[0])
	}
	if err := check(C.hf_go_buffer_copy(p, ptr, C.size_t(len(out)), &msg), msg); err != nil {
		return nil, err
	}
	return out, nil
}
