package hostfirst

/*
#cgo pkg-config: hostfirst
#include <stdlib.h>
#include <string.h>
#include <hostfirst.h>
#include "hf_go_error.h"


// which = 0: sync_stream, 1: record_stream.
static hostfirst_status hf_go_buffer_stream(uintptr_t b, int which, int64_t stream, hf_go_error **err) {
	hostfirst_status st = which ? hostfirst_buffer_record_stream((const hostfirst_buffer *)b, stream)
	                            : hostfirst_buffer_sync_stream((const hostfirst_buffer *)b, stream);
	*err = hf_go_error_take(st);
	return st;
}

// from_buffer = 0: a view; 1: a buffer. The versioned form (DLPack 1.x), read-only for a view.
static hostfirst_status hf_go_to_dlpack(uintptr_t h, int from_buffer, hostfirst_dlpack_managed_tensor_versioned **out,
                                        hf_go_error **err) {
	hostfirst_dlpack_options o;
	hostfirst_status st = hostfirst_dlpack_options_init(&o, sizeof o);
	if (st == HOSTFIRST_STATUS_OK)
		st = from_buffer ? hostfirst_buffer_to_dlpack((const hostfirst_buffer *)h, &o, out, NULL)
		                 : hostfirst_view_to_dlpack((const hostfirst_view *)h, &o, out, NULL);
	*err = hf_go_error_take(st);
	return st;
}

static void hf_go_dlpack_delete(hostfirst_dlpack_managed_tensor_versioned *t) {
	if (t && t->deleter) t->deleter(t);
}

static hostfirst_status hf_go_dtype_to_dlpack(const char *name, hostfirst_dlpack_dtype *out, hf_go_error **err) {
	hostfirst_dtype d;
	hostfirst_status st = hostfirst_dtype_from_name(name, &d);
	if (st == HOSTFIRST_STATUS_OK) st = hostfirst_dtype_to_dlpack(d, out);
	*err = hf_go_error_take(st);
	return st;
}
*/
import "C"

import (
	"runtime"
	"sync"
	"unsafe"
)

// SyncStream makes CUDA stream (DLPack's values: 1 legacy default, 2 per-thread default, > 2 a CUstream of
// the buffer's device, -1 nothing) wait until hostfirst's last write into the buffer has completed.
func (b *Buffer) SyncStream(stream int64) error { return b.stream(0, stream) }

// RecordStream records an event on stream that hostfirst waits for before it next rewrites the buffer (call
// it after the last work using the buffer on that stream, when it went out by address, not by DLPack).
func (b *Buffer) RecordStream(stream int64) error { return b.stream(1, stream) }

func (b *Buffer) stream(which C.int, stream int64) error {
	p, err := b.h.get()
	if err != nil {
		return err
	}
	defer runtime.KeepAlive(b)
	var msg *C.hf_go_error
	return check(C.hf_go_buffer_stream(p, which, C.int64_t(stream), &msg), msg)
}

// DLPackTensor is a DLPack 1.x export (DLManagedTensorVersioned) owned by Go until it is handed on: Close
// calls its deleter; Release hands the pointer to a consumer, which then owns it.
type DLPackTensor struct {
	mu    sync.Mutex
	p     *C.hostfirst_dlpack_managed_tensor_versioned
	owner interface{} // the View or Buffer exported: keeps Go-owned memory under it (OpenMemory's) reachable
}

func newDLPack(h C.uintptr_t, fromBuffer C.int, owner interface{}) (*DLPackTensor, error) {
	var out *C.hostfirst_dlpack_managed_tensor_versioned
	var msg *C.hf_go_error
	if err := check(C.hf_go_to_dlpack(h, fromBuffer, &out, &msg), msg); err != nil {
		return nil, err
	}
	t := &DLPackTensor{p: out, owner: owner}
	runtime.SetFinalizer(t, (*DLPackTensor).Close)
	return t, nil
}

// DLPack exports the view (read-only, kDLCPU: it points into the file's mapping).
func (v *View) DLPack() (*DLPackTensor, error) {
	p, err := v.h.get()
	if err != nil {
		return nil, err
	}
	defer runtime.KeepAlive(v)
	return newDLPack(p, 0, v)
}

// DLPack exports the buffer on its device.
func (b *Buffer) DLPack() (*DLPackTensor, error) {
	p, err := b.h.get()
	if err != nil {
		return nil, err
	}
	defer runtime.KeepAlive(b)
	return newDLPack(p, 1, b)
}

// Shape is the tensor's shape; Data its first byte (valid until Close or Release).
func (t *DLPackTensor) Shape() []uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.p == nil {
		return nil
	}
	n := int(t.p.dl_tensor.ndim)
	if n == 0 {
		return []uint64{}
	}
	out := make([]uint64, n)
	for i, d := range unsafe.Slice((*C.int64_t)(unsafe.Pointer(t.p.dl_tensor.shape)), n) {
		out[i] = uint64(d)
	}
	return out
}

// Data is the address of the tensor's first element (plus byte_offset) on its device.
func (t *DLPackTensor) Data() unsafe.Pointer {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.p == nil {
		return nil
	}
	return unsafe.Add(t.p.dl_tensor.data, int(t.p.dl_tensor.byte_offset))
}

// Release hands the DLManagedTensorVersioned pointer to a consumer (which calls its deleter); t is empty after.
// The export keeps its library handles alive, but not Go memory: for a view of a File from OpenMemory, keep
// that File reachable (runtime.KeepAlive) until the consumer has called the deleter.
func (t *DLPackTensor) Release() unsafe.Pointer {
	t.mu.Lock()
	defer t.mu.Unlock()
	runtime.SetFinalizer(t, nil)
	p := t.p
	t.p = nil
	t.owner = nil
	return unsafe.Pointer(p)
}

// Close calls the export's deleter (once; later calls do nothing).
func (t *DLPackTensor) Close() error {
	p := (*C.hostfirst_dlpack_managed_tensor_versioned)(t.Release())
	C.hf_go_dlpack_delete(p)
	return nil
}

// DLPackDType is dtype (a safetensors name) as DLPack's DLDataType.
func DLPackDType(dtype string) (code uint8, bits uint8, lanes uint16, err error) {
	cs := C.CString(dtype)
	defer C.free(unsafe.Pointer(cs))
	var d C.hostfirst_dlpack_dtype
	var msg *C.hf_go_error
	if err := check(C.hf_go_dtype_to_dlpack(cs, &d, &msg), msg); err != nil {
		return 0, 0, 0, err
	}
	return uint8(d.code), uint8(d.bits), uint16(d.lanes), nil
}
