package hostfirst

/*
#cgo pkg-config: hostfirst
#include <stdlib.h>
#include <string.h>
#include <hostfirst.h>
#include "hf_go_error.h"


static hostfirst_status hf_go_open_format(const char *path, hostfirst_format format, uintptr_t *out, hf_go_error **err) {
	hostfirst_file *f = NULL;
	hostfirst_status st = hostfirst_file_open_format(path, format, &f);
	if (st == HOSTFIRST_STATUS_OK) *out = (uintptr_t)f;
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_open_raw(const char *path, const char *dtype, const uint64_t *shape, size_t rank,
                                       uint64_t offset, const char *name, uintptr_t *out, hf_go_error **err) {
	hostfirst_dtype d;
	hostfirst_file *f = NULL;
	hostfirst_status st = hostfirst_dtype_from_name(dtype, &d);
	if (st == HOSTFIRST_STATUS_OK) st = hostfirst_file_open_raw(path, d, shape, rank, offset, name, &f);
	if (st == HOSTFIRST_STATUS_OK) *out = (uintptr_t)f;
	*err = hf_go_error_take(st);
	return st;
}

// `data` is C memory the File owns (freed after the handle).
static hostfirst_status hf_go_open_memory(const void *data, size_t len, uintptr_t *out, hf_go_error **err) {
	hostfirst_file *f = NULL;
	hostfirst_status st = hostfirst_file_open_memory(data, len, &f);
	if (st == HOSTFIRST_STATUS_OK) *out = (uintptr_t)f;
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_file_format(uintptr_t f, hostfirst_format *out, hf_go_error **err) {
	hostfirst_status st = hostfirst_file_format((const hostfirst_file *)f, out);
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_sequence_spans(uintptr_t f, const uint64_t *idx, size_t n, uint64_t *starts,
                                             uint64_t *lengths, hf_go_error **err) {
	hostfirst_status st = hostfirst_file_sequence_spans((const hostfirst_file *)f, idx, n, starts, lengths);
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_file_path(uintptr_t f, const char **out, hf_go_error **err) {
	hostfirst_status st = hostfirst_file_path((const hostfirst_file *)f, out);
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_file_data_bytes(uintptr_t f, uint64_t *out, hf_go_error **err) {
	hostfirst_status st = hostfirst_file_data_bytes((const hostfirst_file *)f, out);
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_file_find(uintptr_t f, const char *name, size_t *out, hf_go_error **err) {
	hostfirst_status st = hostfirst_file_find((const hostfirst_file *)f, name, out);
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_metadata_count(uintptr_t f, size_t *out, hf_go_error **err) {
	hostfirst_status st = hostfirst_file_metadata_count((const hostfirst_file *)f, out);
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_metadata_get(uintptr_t f, size_t i, const char **k, const char **v, hf_go_error **err) {
	hostfirst_status st = hostfirst_file_metadata_get((const hostfirst_file *)f, i, k, v);
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_metadata_find(uintptr_t f, const char *key, const char **v, hf_go_error **err) {
	hostfirst_status st = hostfirst_file_metadata_find((const hostfirst_file *)f, key, v);
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_gather_new(hostfirst_device d, const char *dtype, uint64_t batch, uint64_t window,
                                         uintptr_t *out, hf_go_error **err) {
	hostfirst_dtype t;
	hostfirst_gather *g = NULL;
	hostfirst_status st = hostfirst_dtype_from_name(dtype, &t);
	if (st == HOSTFIRST_STATUS_OK) st = hostfirst_gather_new(d, t, batch, window, &g);
	if (st == HOSTFIRST_STATUS_OK) *out = (uintptr_t)g;
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_gather_run(uintptr_t g, uintptr_t v, const uint64_t *offsets, size_t n, uintptr_t *out,
                                         hf_go_error **err) {
	hostfirst_buffer *b = NULL;
	hostfirst_status st = hostfirst_gather_run((hostfirst_gather *)g, (const hostfirst_view *)v, offsets, n, &b);
	if (st == HOSTFIRST_STATUS_OK) *out = (uintptr_t)b;
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_gather_run_sequences(uintptr_t g, uintptr_t f, const uint64_t *idx, size_t n, uint64_t pad,
                                                   uint64_t *lengths, uintptr_t *out, hf_go_error **err) {
	hostfirst_buffer *b = NULL;
	hostfirst_status st = hostfirst_gather_run_sequences((hostfirst_gather *)g, (const hostfirst_file *)f, idx, n, pad,
	                                                     lengths, &b);
	if (st == HOSTFIRST_STATUS_OK) *out = (uintptr_t)b;
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_gather_batch(uintptr_t g, uintptr_t *out, hf_go_error **err) {
	hostfirst_buffer *b = NULL;
	hostfirst_status st = hostfirst_gather_batch((const hostfirst_gather *)g, &b);
	if (st == HOSTFIRST_STATUS_OK) *out = (uintptr_t)b;
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_gather_nbytes(uintptr_t g, uint64_t *out, hf_go_error **err) {
	hostfirst_status st = hostfirst_gather_nbytes((const hostfirst_gather *)g, out);
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_gather_copy(uintptr_t g, void *dst, size_t cap, hf_go_error **err) {
	hostfirst_status st = hostfirst_gather_copy_to_host((const hostfirst_gather *)g, dst, cap);
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_gather_free(uintptr_t g, hf_go_error **err) {
	hostfirst_status st = hostfirst_gather_free((hostfirst_gather *)g);
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_build_info(char *buf, size_t capacity, size_t *len, hf_go_error **err) {
	hostfirst_status st = hostfirst_build_info(buf, capacity, len);
	*err = st == HOSTFIRST_STATUS_BUFFER_TOO_SMALL ? NULL : hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_file_read_engine(uintptr_t f, char *buf, size_t capacity, size_t *len, hf_go_error **err) {
	hostfirst_status st = hostfirst_file_read_engine((const hostfirst_file *)f, buf, capacity, len);
	*err = st == HOSTFIRST_STATUS_BUFFER_TOO_SMALL ? NULL : hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_dtype_bits(const char *name, uint32_t *bits, hf_go_error **err) {
	hostfirst_dtype d;
	hostfirst_status st = hostfirst_dtype_from_name(name, &d);
	if (st == HOSTFIRST_STATUS_OK) *bits = hostfirst_dtype_bits(d);
	*err = hf_go_error_take(st);
	return st;
}
*/
import "C"

import (
	"runtime"
	"unsafe"
)

// Format is a hostfirst_format: how a file is read (its values are never renumbered).
type Format uint32

// The formats hostfirst_file_open recognises by content, and the headerless layout of OpenRaw.
const (
	FormatAuto             Format = C.HOSTFIRST_FORMAT_AUTO
	FormatSafetensors      Format = C.HOSTFIRST_FORMAT_SAFETENSORS
	FormatSafetensorsIndex Format = C.HOSTFIRST_FORMAT_SAFETENSORS_INDEX
	FormatNPY              Format = C.HOSTFIRST_FORMAT_NPY
	FormatLLMC             Format = C.HOSTFIRST_FORMAT_LLMC
	FormatMegatron         Format = C.HOSTFIRST_FORMAT_MEGATRON
	FormatRaw              Format = C.HOSTFIRST_FORMAT_RAW
)

// RawInfer, as the one dimension of OpenRaw's shape it may stand for, is inferred from the file's size.
const RawInfer uint64 = C.HOSTFIRST_FILE_RAW_INFER

// String is the library's name of the format, such as "MEGATRON" ("UNKNOWN" for another value).
func (f Format) String() string { return C.GoString(C.hostfirst_format_name(C.hostfirst_format(f))) }

// ReadEngine reports how the file is read (hostfirst_file_read_engine, new in 1.1): its file system, whether
// its views are mapped or read with owned reads (network and user-space file systems) and why, the reader, and
// whether direct I/O works for it. One line per part file for a multi-file set.
func (f *File) ReadEngine() (string, error) {
	p, err := f.h.get()
	if err != nil {
		return "", err
	}
	defer runtime.KeepAlive(f)
	var n C.size_t
	var msg *C.hf_go_error
	if st := C.hf_go_file_read_engine(p, nil, 0, &n, &msg); st != C.HOSTFIRST_STATUS_BUFFER_TOO_SMALL {
		if err := check(st, msg); err != nil {
			return "", err
		}
	}
	buf := make([]byte, int(n)+1)
	if err := check(C.hf_go_file_read_engine(p, (*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)), &n, &msg), msg); err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// BuildInfo describes the build: version, features, CUDA API level and the read engine.
func BuildInfo() (string, error) {
	var n C.size_t
	var msg *C.hf_go_error
	if st := C.hf_go_build_info(nil, 0, &n, &msg); st != C.HOSTFIRST_STATUS_BUFFER_TOO_SMALL {
		if err := check(st, msg); err != nil {
			return "", err
		}
	}
	buf := make([]byte, int(n)+1)
	if err := check(C.hf_go_build_info((*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)), &n, &msg), msg); err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// DTypeBits is the size of one element of dtype (a safetensors name such as "BF16") in bits.
func DTypeBits(dtype string) (int, error) {
	cs := C.CString(dtype)
	defer C.free(unsafe.Pointer(cs))
	var bits C.uint32_t
	var msg *C.hf_go_error
	if err := check(C.hf_go_dtype_bits(cs, &bits, &msg), msg); err != nil {
		return 0, err
	}
	return int(bits), nil
}

func u64s(s []uint64) *C.uint64_t {
	if len(s) == 0 {
		return nil
	}
	return (*C.uint64_t)(unsafe.Pointer(&s[0])) // Go memory without Go pointers, not kept by C after the call
}

func newFile(id C.uintptr_t) *File {
	file := &File{h: handle{id: id}}
	runtime.SetFinalizer(file, (*File).Close)
	return file
}

// OpenFormat opens path as the given format (FormatAuto: as Open, by content), refusing another.
func OpenFormat(path string, format Format) (*File, error) {
	if versionErr != nil {
		return nil, versionErr
	}
	cs := C.CString(path)
	defer C.free(unsafe.Pointer(cs))
	var id C.uintptr_t
	var msg *C.hf_go_error
	if err := check(C.hf_go_open_format(cs, C.hostfirst_format(format), &id, &msg), msg); err != nil {
		return nil, err
	}
	return newFile(id), nil
}

// OpenRaw opens a headerless file as one tensor (name "": "data") of dtype (a safetensors name) and shape
// (C order; one dimension may be RawInfer), starting at byte offset.
func OpenRaw(path, dtype string, shape []uint64, offset uint64, name string) (*File, error) {
	if versionErr != nil {
		return nil, versionErr
	}
	cpath, cdtype := C.CString(path), C.CString(dtype)
	defer C.free(unsafe.Pointer(cpath))
	defer C.free(unsafe.Pointer(cdtype))
	var cname *C.char
	if name != "" {
		cname = C.CString(name)
		defer C.free(unsafe.Pointer(cname))
	}
	var id C.uintptr_t
	var msg *C.hf_go_error
	st := C.hf_go_open_raw(cpath, cdtype, u64s(shape), C.size_t(len(shape)), C.uint64_t(offset), cname, &id, &msg)
	if err := check(st, msg); err != nil {
		return nil, err
	}
	return newFile(id), nil
}

// OpenMemory opens a safetensors (or .npy, llm.c) image held in memory; the bytes are copied first, into
// memory the File keeps until it and its views are closed.
func OpenMemory(data []byte) (*File, error) {
	if versionErr != nil {
		return nil, versionErr
	}
	mem := C.malloc(C.size_t(len(data) + 1))
	if len(data) > 0 {
		C.memcpy(mem, unsafe.Pointer(&data[0]), C.size_t(len(data)))
	}
	var id C.uintptr_t
	var msg *C.hf_go_error
	if err := check(C.hf_go_open_memory(mem, C.size_t(len(data)), &id, &msg), msg); err != nil {
		C.free(mem)
		return nil, err
	}
	file := &File{h: handle{id: id}, mem: newCmem(mem)}
	runtime.SetFinalizer(file, (*File).Close)
	return file, nil
}

// Format is how the file was read.
func (f *File) Format() (Format, error) {
	p, err := f.h.get()
	if err != nil {
		return 0, err
	}
	defer runtime.KeepAlive(f)
	var out C.hostfirst_format
	var msg *C.hf_go_error
	if err := check(C.hf_go_file_format(p, &out, &msg), msg); err != nil {
		return 0, err
	}
	return Format(out), nil
}

// SequenceSpans gives, for a Megatron dataset, the element offset in "tokens" and the length of each sequence.
func (f *File) SequenceSpans(indices []uint64) (starts, lengths []uint64, err error) {
	p, err := f.h.get()
	if err != nil {
		return nil, nil, err
	}
	defer runtime.KeepAlive(f)
	starts, lengths = make([]uint64, len(indices)), make([]uint64, len(indices))
	var msg *C.hf_go_error
	st := C.hf_go_sequence_spans(p, u64s(indices), C.size_t(len(indices)), u64s(starts), u64s(lengths), &msg)
	if err := check(st, msg); err != nil {
		return nil, nil, err
	}
	return starts, lengths, nil
}

// Path is the path the file was opened from (an *Error with StatusNotFound for OpenMemory).
func (f *File) Path() (string, error) {
	p, err := f.h.get()
	if err != nil {
		return "", err
	}
	defer runtime.KeepAlive(f)
	var out *C.char
	var msg *C.hf_go_error
	if err := check(C.hf_go_file_path(p, &out, &msg), msg); err != nil {
		return "", err
	}
	if out == nil {
		return "", nil
	}
	return C.GoString(out), nil
}

// DataBytes is the size of the file's tensor data.
func (f *File) DataBytes() (uint64, error) {
	p, err := f.h.get()
	if err != nil {
		return 0, err
	}
	defer runtime.KeepAlive(f)
	var out C.uint64_t
	var msg *C.hf_go_error
	if err := check(C.hf_go_file_data_bytes(p, &out, &msg), msg); err != nil {
		return 0, err
	}
	return uint64(out), nil
}

// Find is the index of tensor name in the file's order (TensorNames).
func (f *File) Find(name string) (int, error) {
	p, err := f.h.get()
	if err != nil {
		return 0, err
	}
	defer runtime.KeepAlive(f)
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	var out C.size_t
	var msg *C.hf_go_error
	if err := check(C.hf_go_file_find(p, cs, &out, &msg), msg); err != nil {
		return 0, err
	}
	return int(out), nil
}

// Metadata is the file's __metadata__ in its order.
func (f *File) Metadata() ([]MetadataEntry, error) {
	p, err := f.h.get()
	if err != nil {
		return nil, err
	}
	defer runtime.KeepAlive(f)
	var n C.size_t
	var msg *C.hf_go_error
	if err := check(C.hf_go_metadata_count(p, &n, &msg), msg); err != nil {
		return nil, err
	}
	out := make([]MetadataEntry, 0, n)
	for i := C.size_t(0); i < n; i++ {
		var k, v *C.char
		if err := check(C.hf_go_metadata_get(p, i, &k, &v, &msg), msg); err != nil {
			return nil, err
		}
		out = append(out, MetadataEntry{C.GoString(k), C.GoString(v)})
	}
	return out, nil
}

// MetadataValue is the value of __metadata__ key (an *Error with StatusNotFound when there is none).
func (f *File) MetadataValue(key string) (string, error) {
	p, err := f.h.get()
	if err != nil {
		return "", err
	}
	defer runtime.KeepAlive(f)
	cs := C.CString(key)
	defer C.free(unsafe.Pointer(cs))
	var v *C.char
	var msg *C.hf_go_error
	if err := check(C.hf_go_metadata_find(p, cs, &v, &msg), msg); err != nil {
		return "", err
	}
	return C.GoString(v), nil
}

// Gather assembles batches of windows of one tensor (or whole Megatron sequences) on one device, from a
// bounded ring: a batch Buffer it hands out is never rewritten until that Buffer is closed.
type Gather struct{ h handle }

// NewGather makes a gather of batch rows of window elements of dtype (a safetensors name) on device.
func NewGather(device Device, dtype string, batch, window uint64) (*Gather, error) {
	if versionErr != nil {
		return nil, versionErr
	}
	cs := C.CString(dtype)
	defer C.free(unsafe.Pointer(cs))
	var id C.uintptr_t
	var msg *C.hf_go_error
	if err := check(C.hf_go_gather_new(device.c(), cs, C.uint64_t(batch), C.uint64_t(window), &id, &msg), msg); err != nil {
		return nil, err
	}
	g := &Gather{h: handle{id: id}}
	runtime.SetFinalizer(g, (*Gather).Close)
	return g, nil
}

func newBuffer(id C.uintptr_t) *Buffer {
	b := &Buffer{h: handle{id: id}}
	runtime.SetFinalizer(b, (*Buffer).Close)
	return b
}

// Run fills the next batch: row i is the window of source's elements starting at offsets[i] (one per row).
func (g *Gather) Run(source *View, offsets []uint64) (*Buffer, error) {
	p, err := g.h.get()
	if err != nil {
		return nil, err
	}
	vp, err := source.h.get()
	if err != nil {
		return nil, err
	}
	defer runtime.KeepAlive(g)
	defer runtime.KeepAlive(source)
	var id C.uintptr_t
	var msg *C.hf_go_error
	if err := check(C.hf_go_gather_run(p, vp, u64s(offsets), C.size_t(len(offsets)), &id, &msg), msg); err != nil {
		return nil, err
	}
	return newBuffer(id), nil
}

// RunSequences fills the next batch with whole sequences of a Megatron dataset, padded with pad to the window;
// lengths[i] is the number of tokens row i holds.
func (g *Gather) RunSequences(dataset *File, indices []uint64, pad uint64) (batch *Buffer, lengths []uint64, err error) {
	p, err := g.h.get()
	if err != nil {
		return nil, nil, err
	}
	fp, err := dataset.h.get()
	if err != nil {
		return nil, nil, err
	}
	defer runtime.KeepAlive(g)
	defer runtime.KeepAlive(dataset)
	lengths = make([]uint64, len(indices))
	var id C.uintptr_t
	var msg *C.hf_go_error
	st := C.hf_go_gather_run_sequences(p, fp, u64s(indices), C.size_t(len(indices)), C.uint64_t(pad), u64s(lengths), &id, &msg)
	if err := check(st, msg); err != nil {
		return nil, nil, err
	}
	return newBuffer(id), lengths, nil
}

// Batch is a new Buffer of the current batch (the last run's).
func (g *Gather) Batch() (*Buffer, error) {
	p, err := g.h.get()
	if err != nil {
		return nil, err
	}
	defer runtime.KeepAlive(g)
	var id C.uintptr_t
	var msg *C.hf_go_error
	if err := check(C.hf_go_gather_batch(p, &id, &msg), msg); err != nil {
		return nil, err
	}
	return newBuffer(id), nil
}

// Bytes copies the current batch to Go memory (batch * window * element size bytes, C order).
func (g *Gather) Bytes() ([]byte, error) {
	p, err := g.h.get()
	if err != nil {
		return nil, err
	}
	defer runtime.KeepAlive(g)
	var n C.uint64_t
	var msg *C.hf_go_error
	if err := check(C.hf_go_gather_nbytes(p, &n, &msg), msg); err != nil {
		return nil, err
	}
	out := make([]byte, int(n))
	var ptr unsafe.Pointer
	if len(out) > 0 {
		ptr = unsafe.Pointer(&out[0])
	}
	if err := check(C.hf_go_gather_copy(p, ptr, C.size_t(len(out)), &msg), msg); err != nil {
		return nil, err
	}
	return out, nil
}

// Close frees the gather; batches already handed out stay valid until closed.
func (g *Gather) Close() error {
	runtime.SetFinalizer(g, nil)
	return g.h.release(func(id C.uintptr_t) error {
		var msg *C.hf_go_error
		return check(C.hf_go_gather_free(id, &msg), msg)
	})
}
