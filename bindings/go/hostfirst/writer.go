package hostfirst

/*
#cgo pkg-config: hostfirst
#include <stdlib.h>
#include <string.h>
#include <hostfirst.h>
#include "hf_go_error.h"


static hostfirst_status hf_go_writer_open(const char *path, uint64_t max_part_bytes, int no_sync, uintptr_t *out,
                                          hf_go_error **err) {
	hostfirst_writer_options o;
	hostfirst_status st = hostfirst_writer_options_init(&o, sizeof o);
	hostfirst_writer *w = NULL;
	if (st == HOSTFIRST_STATUS_OK) {
		o.max_part_bytes = max_part_bytes;
		o.no_sync = no_sync;
		st = hostfirst_writer_open(path, &o, &w);
	}
	if (st == HOSTFIRST_STATUS_OK) *out = (uintptr_t)w;
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_writer_open_fd(int32_t fd, uint64_t max_part_bytes, int no_sync, uintptr_t *out,
                                             hf_go_error **err) {
	hostfirst_writer_options o;
	hostfirst_status st = hostfirst_writer_options_init(&o, sizeof o);
	hostfirst_writer *w = NULL;
	if (st == HOSTFIRST_STATUS_OK) {
		o.max_part_bytes = max_part_bytes;
		o.no_sync = no_sync;
		st = hostfirst_writer_open_fd(fd, &o, &w);
	}
	if (st == HOSTFIRST_STATUS_OK) *out = (uintptr_t)w;
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_writer_declare(uintptr_t w, const char *name, const char *dtype, const uint64_t *shape,
                                             size_t rank, hf_go_error **err) {
	hostfirst_dtype d;
	hostfirst_status st = hostfirst_dtype_from_name(dtype, &d);
	if (st == HOSTFIRST_STATUS_OK) st = hostfirst_writer_declare((hostfirst_writer *)w, name, d, shape, rank);
	*err = hf_go_error_take(st);
	return st;
}

// `data` is C memory the Writer keeps until it is closed.
static hostfirst_status hf_go_writer_piece_host(uintptr_t w, const char *name, const uint64_t *start,
                                                const uint64_t *len, size_t rank, const void *data, size_t nbytes,
                                                hf_go_error **err) {
	hostfirst_status st = hostfirst_writer_add_piece_host((hostfirst_writer *)w, name, start, len, rank, data, nbytes);
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_writer_piece_buffer(uintptr_t w, const char *name, const uint64_t *start, size_t rank,
                                                  uintptr_t b, hf_go_error **err) {
	hostfirst_status st =
	    hostfirst_writer_add_piece_buffer((hostfirst_writer *)w, name, start, rank, (const hostfirst_buffer *)b);
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_writer_piece_view(uintptr_t w, const char *name, const uint64_t *start, size_t rank,
                                                uintptr_t v, hf_go_error **err) {
	hostfirst_status st =
	    hostfirst_writer_add_piece_view((hostfirst_writer *)w, name, start, rank, (const hostfirst_view *)v);
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_writer_add_view(uintptr_t w, const char *name, uintptr_t v, hf_go_error **err) {
	hostfirst_status st = hostfirst_writer_add_view((hostfirst_writer *)w, name, (const hostfirst_view *)v);
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_writer_add_buffer(uintptr_t w, const char *name, uintptr_t b, hf_go_error **err) {
	hostfirst_status st = hostfirst_writer_add_buffer((hostfirst_writer *)w, name, (const hostfirst_buffer *)b);
	*err = hf_go_error_take(st);
	return st;
}

// `data` is C memory the Writer keeps until it is closed.
static hostfirst_status hf_go_writer_add_host(uintptr_t w, const char *name, const char *dtype, const uint64_t *shape,
                                              size_t rank, const void *data, size_t nbytes, hf_go_error **err) {
	hostfirst_dtype d;
	hostfirst_status st = hostfirst_dtype_from_name(dtype, &d);
	if (st == HOSTFIRST_STATUS_OK)
		st = hostfirst_writer_add_host((hostfirst_writer *)w, name, d, shape, rank, data, nbytes);
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_writer_metadata(uintptr_t w, const char **keys, const char **values, size_t n,
                                              hf_go_error **err) {
	hostfirst_status st = hostfirst_writer_set_metadata((hostfirst_writer *)w, keys, values, n);
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_writer_finish(uintptr_t w, hostfirst_writer_info *out, hf_go_error **err) {
	out->struct_size = sizeof *out;
	hostfirst_status st = hostfirst_writer_finish((hostfirst_writer *)w, out);
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_writer_part(uintptr_t w, size_t i, const char **out, hf_go_error **err) {
	hostfirst_status st = hostfirst_writer_part_path((hostfirst_writer *)w, i, out);
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_writer_free(uintptr_t w, hf_go_error **err) {
	hostfirst_status st = hostfirst_writer_free((hostfirst_writer *)w);
	*err = hf_go_error_take(st);
	return st;
}
*/
import "C"

import (
	"runtime"
	"unsafe"
)

// WriterOptions are the options of Create; the zero value is one file, synced before Finish returns.
type WriterOptions struct {
	MaxPartBytes uint64 // split into Hugging Face part files and an index of at most this many bytes each
	NoSync       bool   // skip the fsyncs (the target is still replaced by a rename, never written in place)
}

// MetadataEntry is one entry of a file's __metadata__, written in the order given.
type MetadataEntry struct{ Key, Value string }

// WriteInfo is what a finished save wrote.
type WriteInfo struct {
	Parts     []string // the safetensors files
	Index     string   // the index of a split save ("" for one file)
	FileBytes uint64
	Tensors   uint64
}

// Writer writes one safetensors file (or a set of part files): declare tensors, set the metadata, Finish once,
// Close. Finish writes a temporary file beside the target and renames it over the target when complete (never
// a half-written file). Bytes given with AddBytes are copied into memory the Writer owns until Close (cgo
// lets C keep no Go memory); views and buffers are written from where they are.
type Writer struct {
	h    handle
	mem  []unsafe.Pointer
	keep []interface{}
}

// Create opens a writer of the safetensors file at path (nothing is written before Finish).
func Create(path string, opts *WriterOptions) (*Writer, error) {
	if opts == nil {
		opts = &WriterOptions{}
	}
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	noSync := C.int(0)
	if opts.NoSync {
		noSync = 1
	}
	var id C.uintptr_t
	var msg *C.hf_go_error
	if err := check(C.hf_go_writer_open(cpath, C.uint64_t(opts.MaxPartBytes), noSync, &id, &msg), msg); err != nil {
		return nil, err
	}
	w := &Writer{h: handle{id: id}}
	runtime.SetFinalizer(w, (*Writer).Close)
	return w, nil
}

// CreateFD opens a writer into the open descriptor fd (Unix; the writer uses a duplicate and never closes fd).
// MaxPartBytes must be 0: a descriptor is one file.
func CreateFD(fd int, opts *WriterOptions) (*Writer, error) {
	if opts == nil {
		opts = &WriterOptions{}
	}
	noSync := C.int(0)
	if opts.NoSync {
		noSync = 1
	}
	var id C.uintptr_t
	var msg *C.hf_go_error
	if err := check(C.hf_go_writer_open_fd(C.int32_t(fd), C.uint64_t(opts.MaxPartBytes), noSync, &id, &msg), msg); err != nil {
		return nil, err
	}
	w := &Writer{h: handle{id: id}}
	runtime.SetFinalizer(w, (*Writer).Close)
	return w, nil
}

// Declare declares a tensor of dtype and shape whose bytes come in pieces (AddPieceBytes, AddPieceBuffer,
// AddPieceView), which must cover it exactly once by Finish.
func (w *Writer) Declare(name, dtype string, shape []uint64) error {
	p, err := w.h.get()
	if err != nil {
		return err
	}
	defer runtime.KeepAlive(w)
	cname, cdtype := C.CString(name), C.CString(dtype)
	defer C.free(unsafe.Pointer(cname))
	defer C.free(unsafe.Pointer(cdtype))
	var msg *C.hf_go_error
	return check(C.hf_go_writer_declare(p, cname, cdtype, u64s(shape), C.size_t(len(shape)), &msg), msg)
}

// AddPieceBytes gives the block of declared tensor name that starts at start and spans length (per
// dimension), with data (C order within the block), copied now.
func (w *Writer) AddPieceBytes(name string, start, length []uint64, data []byte) error {
	p, err := w.h.get()
	if err != nil {
		return err
	}
	defer runtime.KeepAlive(w)
	if len(start) != len(length) {
		return &Error{Status: StatusInvalidArgument, Message: "AddPieceBytes: start and length differ in rank"}
	}
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	mem := C.malloc(C.size_t(len(data) + 1))
	if len(data) > 0 {
		C.memcpy(mem, unsafe.Pointer(&data[0]), C.size_t(len(data)))
	}
	var msg *C.hf_go_error
	st := C.hf_go_writer_piece_host(p, cname, u64s(start), u64s(length), C.size_t(len(start)), mem, C.size_t(len(data)), &msg)
	if err := check(st, msg); err != nil {
		C.free(mem)
		return err
	}
	w.mem = append(w.mem, mem)
	return nil
}

// AddPieceBuffer gives the block of declared tensor name at start with the bytes of b (its shape is the
// block's), on any device.
func (w *Writer) AddPieceBuffer(name string, start []uint64, b *Buffer) error {
	p, err := w.h.get()
	if err != nil {
		return err
	}
	bp, err := b.h.get()
	if err != nil {
		return err
	}
	defer runtime.KeepAlive(w)
	defer runtime.KeepAlive(b)
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var msg *C.hf_go_error
	if err := check(C.hf_go_writer_piece_buffer(p, cname, u64s(start), C.size_t(len(start)), bp, &msg), msg); err != nil {
		return err
	}
	w.keep = append(w.keep, b) // read at Finish: its memory (an OpenMemory copy) must stay
	return nil
}

// AddPieceView gives the block of declared tensor name at start with the bytes of v (its shape is the block's).
func (w *Writer) AddPieceView(name string, start []uint64, v *View) error {
	p, err := w.h.get()
	if err != nil {
		return err
	}
	vp, err := v.h.get()
	if err != nil {
		return err
	}
	defer runtime.KeepAlive(w)
	defer runtime.KeepAlive(v)
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var msg *C.hf_go_error
	if err := check(C.hf_go_writer_piece_view(p, cname, u64s(start), C.size_t(len(start)), vp, &msg), msg); err != nil {
		return err
	}
	w.keep = append(w.keep, v) // read at Finish: its memory (an OpenMemory copy) must stay
	return nil
}

func (w *Writer) name(name string) *C.char {
	if name == "" {
		return nil
	}
	return C.CString(name)
}

// AddView declares a tensor with the bytes of v (name "": the view's own name), read from its file at Finish.
func (w *Writer) AddView(name string, v *View) error {
	p, err := w.h.get()
	if err != nil {
		return err
	}
	vp, err := v.h.get()
	if err != nil {
		return err
	}
	defer runtime.KeepAlive(w)
	defer runtime.KeepAlive(v)
	cname := w.name(name)
	defer C.free(unsafe.Pointer(cname))
	var msg *C.hf_go_error
	if err := check(C.hf_go_writer_add_view(p, cname, vp, &msg), msg); err != nil {
		return err
	}
	w.keep = append(w.keep, v) // read at Finish: its memory (an OpenMemory copy) must stay
	return nil
}

// AddBuffer declares a tensor with the bytes of b, on any device (name "": the buffer's own name).
func (w *Writer) AddBuffer(name string, b *Buffer) error {
	p, err := w.h.get()
	if err != nil {
		return err
	}
	bp, err := b.h.get()
	if err != nil {
		return err
	}
	defer runtime.KeepAlive(w)
	defer runtime.KeepAlive(b)
	cname := w.name(name)
	defer C.free(unsafe.Pointer(cname))
	var msg *C.hf_go_error
	if err := check(C.hf_go_writer_add_buffer(p, cname, bp, &msg), msg); err != nil {
		return err
	}
	w.keep = append(w.keep, b) // read at Finish: its memory (an OpenMemory copy) must stay
	return nil
}

// AddBytes declares a tensor of dtype (a safetensors name: "F32", "BF16", ...) and shape with data (C order,
// little-endian), copied now.
func (w *Writer) AddBytes(name, dtype string, shape []uint64, data []byte) error {
	p, err := w.h.get()
	if err != nil {
		return err
	}
	defer runtime.KeepAlive(w)
	cname, cdtype := C.CString(name), C.CString(dtype)
	defer C.free(unsafe.Pointer(cname))
	defer C.free(unsafe.Pointer(cdtype))
	mem := C.malloc(C.size_t(len(data) + 1))
	if len(data) > 0 {
		C.memcpy(mem, unsafe.Pointer(&data[0]), C.size_t(len(data)))
	}
	dims := C.malloc(C.size_t(8*len(shape) + 8))
	defer C.free(dims)
	for i, d := range shape {
		*(*C.uint64_t)(unsafe.Pointer(uintptr(dims) + uintptr(8*i))) = C.uint64_t(d)
	}
	var msg *C.hf_go_error
	if err := check(C.hf_go_writer_add_host(p, cname, cdtype, (*C.uint64_t)(dims), C.size_t(len(shape)), mem,
		C.size_t(len(data)), &msg), msg); err != nil {
		C.free(mem)
		return err
	}
	w.mem = append(w.mem, mem)
	return nil
}

// SetMetadata sets the file's __metadata__ (written in this order).
func (w *Writer) SetMetadata(entries []MetadataEntry) error {
	p, err := w.h.get()
	if err != nil {
		return err
	}
	defer runtime.KeepAlive(w)
	n := len(entries)
	keys := (*[1 << 20]*C.char)(C.malloc(C.size_t(8*n + 8)))
	values := (*[1 << 20]*C.char)(C.malloc(C.size_t(8*n + 8)))
	defer C.free(unsafe.Pointer(keys))
	defer C.free(unsafe.Pointer(values))
	for i, e := range entries {
		keys[i], values[i] = C.CString(e.Key), C.CString(e.Value)
		defer C.free(unsafe.Pointer(keys[i]))
		defer C.free(unsafe.Pointer(values[i]))
	}
	var msg *C.hf_go_error
	return check(C.hf_go_writer_metadata(p, &keys[0], &values[0], C.size_t(n), &msg), msg)
}

// Finish writes the save and says what it wrote; on error every target is as it was.
func (w *Writer) Finish() (WriteInfo, error) {
	p, err := w.h.get()
	if err != nil {
		return WriteInfo{}, err
	}
	defer runtime.KeepAlive(w)
	var info C.hostfirst_writer_info
	var msg *C.hf_go_error
	if err := check(C.hf_go_writer_finish(p, &info, &msg), msg); err != nil {
		return WriteInfo{}, err
	}
	out := WriteInfo{FileBytes: uint64(info.file_bytes), Tensors: uint64(info.tensors)}
	if info.index != nil {
		out.Index = C.GoString(info.index)
	}
	for i := 0; i < int(info.parts); i++ {
		var path *C.char
		if err := check(C.hf_go_writer_part(p, C.size_t(i), &path, &msg), msg); err != nil {
			return WriteInfo{}, err
		}
		out.Parts = append(out.Parts, C.GoString(path))
	}
	return out, nil
}

// Close frees the writer and the bytes it copied (a writer never finished writes nothing).
func (w *Writer) Close() error {
	runtime.SetFinalizer(w, nil)
	err := w.h.release(func(id C.uintptr_t) error {
		var msg *C.hf_go_error
		return check(C.hf_go_writer_free(id, &msg), msg)
	})
	for _, m := range w.mem {
		C.free(m)
	}
	w.mem = nil
	w.keep = nil
	return err
}
