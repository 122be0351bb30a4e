package hostfirst

/*
#cgo pkg-config: hostfirst
#include <stdlib.h>
#include <string.h>
#include <hostfirst.h>
#include "hf_go_error.h"


static hostfirst_status hf_go_view_at(uintptr_t f, size_t i, uintptr_t *out, hf_go_error **err) {
	hostfirst_view *v = NULL;
	hostfirst_status st = hostfirst_file_view_at((const hostfirst_file *)f, i, &v);
	if (st == HOSTFIRST_STATUS_OK) *out = (uintptr_t)v;
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_view_copy(uintptr_t v, void *dst, size_t capacity, uint64_t *n, hf_go_error **err) {
	hostfirst_status st = hostfirst_view_copy((const hostfirst_view *)v, dst, capacity, n);
	*err = hf_go_error_take(st);
	return st;
}

// rows = 1: slice_rows(a, b); rows = 0: narrow(dim, a, b).
static hostfirst_status hf_go_view_sub(uintptr_t v, int rows, uint32_t dim, uint64_t a, uint64_t b, uintptr_t *out,
                                       hf_go_error **err) {
	hostfirst_view *s = NULL;
	hostfirst_status st = rows ? hostfirst_view_slice_rows((const hostfirst_view *)v, a, b, &s)
	                           : hostfirst_view_narrow((const hostfirst_view *)v, dim, a, b, &s);
	if (st == HOSTFIRST_STATUS_OK) *out = (uintptr_t)s;
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_view_prefault(uintptr_t v, int *populated, hf_go_error **err) {
	int32_t p = 0;
	hostfirst_status st = hostfirst_view_prefault((const hostfirst_view *)v, &p);
	if (st == HOSTFIRST_STATUS_OK) *populated = p;
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_put_start(uintptr_t v, hostfirst_device target, uint32_t threads, uintptr_t *out,
                                        hf_go_error **err) {
	hostfirst_put_options o;
	hostfirst_put_op *op = NULL;
	hostfirst_status st = hostfirst_put_options_init(&o, sizeof o);
	if (st == HOSTFIRST_STATUS_OK) {
		o.threads = threads;
		st = hostfirst_put_start((const hostfirst_view *)v, &target, &o, &op);
	}
	if (st == HOSTFIRST_STATUS_OK) *out = (uintptr_t)op;
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_put_poll(uintptr_t op, hf_go_error **err) {
	hostfirst_status st = hostfirst_put_poll((const hostfirst_put_op *)op);
	*err = st == HOSTFIRST_STATUS_NOT_READY ? NULL : hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_put_wait(uintptr_t op, uintptr_t *out, hf_go_error **err) {
	hostfirst_buffer *b = NULL;
	hostfirst_status st = hostfirst_put_wait((hostfirst_put_op *)op, &b);
	if (st == HOSTFIRST_STATUS_OK) *out = (uintptr_t)b;
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_put_op_free(uintptr_t op, hf_go_error **err) {
	hostfirst_status st = hostfirst_put_op_free((hostfirst_put_op *)op);
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_target_parse(const char *spec, hostfirst_device *out, hf_go_error **err) {
	hostfirst_status st = hostfirst_target_parse(spec, out);
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_device_format(hostfirst_device d, char *buf, size_t capacity, size_t *len, hf_go_error **err) {
	hostfirst_status st = hostfirst_device_format(d, buf, capacity, len);
	*err = st == HOSTFIRST_STATUS_BUFFER_TOO_SMALL ? NULL : hf_go_error_take(st);
	return st;
}

static int hf_go_device_equal(hostfirst_device a, hostfirst_device b) { return hostfirst_device_equal(&a, &b); }

static hostfirst_status hf_go_device_memory(hostfirst_device d, uint64_t *free_bytes, uint64_t *total, hf_go_error **err) {
	hostfirst_status st = hostfirst_device_memory(d, free_bytes, total);
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_device_describe(hostfirst_device d, hostfirst_device_info *out, hf_go_error **err) {
	out->struct_size = sizeof *out;
	hostfirst_status st = hostfirst_device_describe(d, out);
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_buffer_to(uintptr_t b, hostfirst_device d, uintptr_t *out, hf_go_error **err) {
	hostfirst_buffer *o = NULL;
	hostfirst_status st = hostfirst_buffer_to((const hostfirst_buffer *)b, &d, &o);
	if (st == HOSTFIRST_STATUS_OK) *out = (uintptr_t)o;
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_buffer_file_backed(uintptr_t b, int32_t *out, hf_go_error **err) {
	hostfirst_status st = hostfirst_buffer_is_file_backed((const hostfirst_buffer *)b, out);
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_release_cached(hf_go_error **err) {
	hostfirst_status st = hostfirst_release_cached_memory();
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_random_offsets(uint64_t *state, uint64_t len, uint64_t window, uint64_t *out, size_t n,
                                             hf_go_error **err) {
	hostfirst_status st = hostfirst_random_offsets(state, len, window, out, n);
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_gather_ring(uintptr_t g, size_t *bound, size_t *allocated, size_t *held, hf_go_error **err) {
	hostfirst_status st = hostfirst_gather_ring((const hostfirst_gather *)g, bound, allocated, held);
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_gather_set_ring_bound(uintptr_t g, size_t bound, hf_go_error **err) {
	hostfirst_status st = hostfirst_gather_set_ring_bound((hostfirst_gather *)g, bound);
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_gather_set_page_cache(uintptr_t g, uint32_t policy, hf_go_error **err) {
	hostfirst_status st = hostfirst_gather_set_page_cache((hostfirst_gather *)g, (hostfirst_page_cache)policy);
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_gather_run_from_buffer(uintptr_t g, uintptr_t b, const uint64_t *offsets, size_t n,
                                                     uintptr_t *out, hf_go_error **err) {
	hostfirst_buffer *o = NULL;
	hostfirst_status st =
	    hostfirst_gather_run_from_buffer((hostfirst_gather *)g, (const hostfirst_buffer *)b, offsets, n, &o);
	if (st == HOSTFIRST_STATUS_OK) *out = (uintptr_t)o;
	*err = hf_go_error_take(st);
	return st;
}

// from_buffer = 0: source is a view; 1: a host buffer.
static hostfirst_status hf_go_stream_start(uintptr_t g, int from_buffer, uintptr_t source, const uint64_t *offsets,
                                           size_t n_batches, size_t depth, uintptr_t *out, hf_go_error **err) {
	hostfirst_gather_stream *s = NULL;
	hostfirst_status st =
	    from_buffer ? hostfirst_gather_stream_start_from_buffer((hostfirst_gather *)g, (const hostfirst_buffer *)source,
	                                                            offsets, n_batches, depth, &s)
	                : hostfirst_gather_stream_start((hostfirst_gather *)g, (const hostfirst_view *)source, offsets,
	                                                n_batches, depth, &s);
	if (st == HOSTFIRST_STATUS_OK) *out = (uintptr_t)s;
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_stream_next(uintptr_t s, uintptr_t *out, hf_go_error **err) {
	hostfirst_buffer *b = NULL;
	hostfirst_status st = hostfirst_gather_stream_next((hostfirst_gather_stream *)s, &b);
	if (st == HOSTFIRST_STATUS_OK) *out = (uintptr_t)b;
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_stream_free(uintptr_t s, hf_go_error **err) {
	hostfirst_status st = hostfirst_gather_stream_free((hostfirst_gather_stream *)s);
	*err = hf_go_error_take(st);
	return st;
}
*/
import "C"

import (
	"runtime"
	"unsafe"
)

func newView(id C.uintptr_t, f *File) *View {
	v := &View{h: handle{id: id}, file: f}
	runtime.SetFinalizer(v, (*View).Close)
	return v
}

// ViewAt returns the tensor at index i of the file's order (TensorNames).
func (f *File) ViewAt(i int) (*View, error) {
	p, err := f.h.get()
	if err != nil {
		return nil, err
	}
	defer runtime.KeepAlive(f)
	var id C.uintptr_t
	var msg *C.hf_go_error
	if err := check(C.hf_go_view_at(p, C.size_t(i), &id, &msg), msg); err != nil {
		return nil, err
	}
	return newView(id, f), nil
}

// Copy copies the whole tensor into dst (pread: a file changed under the view gives an error, never SIGBUS)
// and returns its size; a dst too small is an *Error with StatusBufferTooSmall and nothing is copied.
func (v *View) Copy(dst []byte) (int, error) {
	p, err := v.h.get()
	if err != nil {
		return 0, err
	}
	defer runtime.KeepAlive(v)
	var ptr unsafe.Pointer
	if len(dst) > 0 {
		ptr = unsafe.Pointer(&dst[0])
	}
	var n C.uint64_t
	var msg *C.hf_go_error
	if err := check(C.hf_go_view_copy(p, ptr, C.size_t(len(dst)), &n, &msg), msg); err != nil {
		return 0, err
	}
	return int(n), nil
}

func (v *View) sub(rows C.int, dim uint32, a, b uint64) (*View, error) {
	p, err := v.h.get()
	if err != nil {
		return nil, err
	}
	defer runtime.KeepAlive(v)
	var id C.uintptr_t
	var msg *C.hf_go_error
	if err := check(C.hf_go_view_sub(p, rows, C.uint32_t(dim), C.uint64_t(a), C.uint64_t(b), &id, &msg), msg); err != nil {
		return nil, err
	}
	return newView(id, v.file), nil
}

// SliceRows is the view of rows start..stop (first dimension), zero-copy.
func (v *View) SliceRows(start, stop uint64) (*View, error) { return v.sub(1, 0, start, stop) }

// Narrow is the view of length elements from start along dimension dim, zero-copy (strided past dim 0).
func (v *View) Narrow(dim uint32, start, length uint64) (*View, error) {
	return v.sub(0, dim, start, length)
}

// Prefault reads the view's pages in ahead of use; populated is false where the system offers only read-ahead
// advice (or the view is over memory).
func (v *View) Prefault() (populated bool, err error) {
	p, err := v.h.get()
	if err != nil {
		return false, err
	}
	defer runtime.KeepAlive(v)
	var out C.int
	var msg *C.hf_go_error
	if err := check(C.hf_go_view_prefault(p, &out, &msg), msg); err != nil {
		return false, err
	}
	return out != 0, nil
}

// PutOp is an asynchronous put (View.PutStart).
type PutOp struct {
	h    handle
	view *View
}

// PutStart starts placing the tensor on device on a worker thread (threads 0: the library's default).
func (v *View) PutStart(device Device, threads uint32) (*PutOp, error) {
	p, err := v.h.get()
	if err != nil {
		return nil, err
	}
	defer runtime.KeepAlive(v)
	var id C.uintptr_t
	var msg *C.hf_go_error
	if err := check(C.hf_go_put_start(p, device.c(), C.uint32_t(threads), &id, &msg), msg); err != nil {
		return nil, err
	}
	op := &PutOp{h: handle{id: id}, view: v}
	runtime.SetFinalizer(op, (*PutOp).Close)
	return op, nil
}

// Poll reports whether the put has finished (successfully or not) without blocking.
func (op *PutOp) Poll() (bool, error) {
	p, err := op.h.get()
	if err != nil {
		return false, err
	}
	defer runtime.KeepAlive(op)
	var msg *C.hf_go_error
	st := C.hf_go_put_poll(p, &msg)
	if st == C.HOSTFIRST_STATUS_NOT_READY {
		return false, nil
	}
	if err := check(st, msg); err != nil {
		return false, err
	}
	return true, nil
}

// Wait blocks until the put finishes and returns its buffer (once: a second Wait is StatusAlreadyUsed).
func (op *PutOp) Wait() (*Buffer, error) {
	p, err := op.h.get()
	if err != nil {
		return nil, err
	}
	defer runtime.KeepAlive(op)
	var id C.uintptr_t
	var msg *C.hf_go_error
	if err := check(C.hf_go_put_wait(p, &id, &msg), msg); err != nil {
		return nil, err
	}
	b := newBuffer(id)
	b.view = op.view
	return b, nil
}

// Close frees the operation (waiting for it if it still runs; a buffer not taken is freed).
func (op *PutOp) Close() error {
	runtime.SetFinalizer(op, nil)
	return op.h.release(func(id C.uintptr_t) error {
		var msg *C.hf_go_error
		return check(C.hf_go_put_op_free(id, &msg), msg)
	})
}

// ParseTarget parses a placement target: a device spec, or "host" / "default" as rules take them.
func ParseTarget(spec string) (Device, error) {
	cs := C.CString(spec)
	defer C.free(unsafe.Pointer(cs))
	var d C.hostfirst_device
	var msg *C.hf_go_error
	if err := check(C.hf_go_target_parse(cs, &d, &msg), msg); err != nil {
		return Device{}, err
	}
	return goDevice(d), nil
}

// String is the device's spec, such as "cuda:1" (what ParseDevice reads back).
func (d Device) String() string {
	var n C.size_t
	var msg *C.hf_go_error
	var buf [64]C.char
	if err := check(C.hf_go_device_format(d.c(), &buf[0], C.size_t(len(buf)), &n, &msg), msg); err != nil {
		return "invalid device"
	}
	return C.GoString(&buf[0])
}

// Equal reports whether d and o name the same device.
func (d Device) Equal(o Device) bool { return C.hf_go_device_equal(d.c(), o.c()) != 0 }

// Memory is the device's free and total memory in bytes.
func (d Device) Memory() (free, total uint64, err error) {
	var f, t C.uint64_t
	var msg *C.hf_go_error
	if err := check(C.hf_go_device_memory(d.c(), &f, &t, &msg), msg); err != nil {
		return 0, 0, err
	}
	return uint64(f), uint64(t), nil
}

// DeviceInfo describes one device.
type DeviceInfo struct {
	Device          Device
	Name            string
	TotalMemory     uint64
	UUID, PCIBusID  string // "" for the host
	ComputeCapMajor int
	ComputeCapMinor int
	Multiprocessors int
}

// Info describes the device.
func (d Device) Info() (DeviceInfo, error) {
	var info C.hostfirst_device_info
	var msg *C.hf_go_error
	if err := check(C.hf_go_device_describe(d.c(), &info, &msg), msg); err != nil {
		return DeviceInfo{}, err
	}
	str := func(s *C.char) string {
		if s == nil {
			return ""
		}
		return C.GoString(s)
	}
	return DeviceInfo{
		Device: goDevice(info.device), Name: str(info.name), TotalMemory: uint64(info.total_memory),
		UUID: str(info.uuid), PCIBusID: str(info.pci_bus_id), ComputeCapMajor: int(info.compute_capability_major),
		ComputeCapMinor: int(info.compute_capability_minor), Multiprocessors: int(info.multiprocessor_count),
	}, nil
}

// To copies the buffer to device into a new Buffer.
func (b *Buffer) To(device Device) (*Buffer, error) {
	p, err := b.h.get()
	if err != nil {
		return nil, err
	}
	defer runtime.KeepAlive(b)
	var id C.uintptr_t
	var msg *C.hf_go_error
	if err := check(C.hf_go_buffer_to(p, device.c(), &id, &msg), msg); err != nil {
		return nil, err
	}
	return newBuffer(id), nil
}

// IsFileBacked reports whether the buffer is a copy-on-write mapping of its file (not a copy).
func (b *Buffer) IsFileBacked() (bool, error) {
	p, err := b.h.get()
	if err != nil {
		return false, err
	}
	defer runtime.KeepAlive(b)
	var out C.int32_t
	var msg *C.hf_go_error
	if err := check(C.hf_go_buffer_file_backed(p, &out, &msg), msg); err != nil {
		return false, err
	}
	return out != 0, nil
}

// ReleaseCachedMemory frees the process-wide caches of page-locked memory.
func ReleaseCachedMemory() error {
	var msg *C.hf_go_error
	return check(C.hf_go_release_cached(&msg), msg)
}

// RandomOffsets draws n start offsets uniform in [0, length - window) from the splitmix64 stream *state
// (which advances: successive calls give successive batches, reproducibly).
func RandomOffsets(state *uint64, length, window uint64, n int) ([]uint64, error) {
	out := make([]uint64, n)
	s := C.uint64_t(*state)
	var msg *C.hf_go_error
	if err := check(C.hf_go_random_offsets(&s, C.uint64_t(length), C.uint64_t(window), u64s(out), C.size_t(n), &msg), msg); err != nil {
		return nil, err
	}
	*state = uint64(s)
	return out, nil
}

// Ring is the gather's ring: its bound, the batches allocated and those held by consumers.
func (g *Gather) Ring() (bound, allocated, held int, err error) {
	p, err := g.h.get()
	if err != nil {
		return 0, 0, 0, err
	}
	defer runtime.KeepAlive(g)
	var b, a, h C.size_t
	var msg *C.hf_go_error
	if err := check(C.hf_go_gather_ring(p, &b, &a, &h, &msg), msg); err != nil {
		return 0, 0, 0, err
	}
	return int(b), int(a), int(h), nil
}

// SetRingBound sets how many batches the ring may allocate.
func (g *Gather) SetRingBound(bound int) error {
	p, err := g.h.get()
	if err != nil {
		return err
	}
	defer runtime.KeepAlive(g)
	var msg *C.hf_go_error
	return check(C.hf_go_gather_set_ring_bound(p, C.size_t(bound), &msg), msg)
}

// SetPageCache sets what the gather's later runs from a file leave in the page cache: "keep" (the default),
// "drop" (the pages the run's windows brought in are dropped when it ends) or "bypass" (read as "drop" for
// gathers). Another value is StatusInvalidArgument naming page_cache, and nothing changes.
func (g *Gather) SetPageCache(policy string) error {
	v, err := pageCacheValue(policy)
	if err != nil {
		return err
	}
	p, err := g.h.get()
	if err != nil {
		return err
	}
	defer runtime.KeepAlive(g)
	var msg *C.hf_go_error
	return check(C.hf_go_gather_set_page_cache(p, C.uint32_t(v), &msg), msg)
}

// RunFromBuffer fills the next batch from a 1-D host buffer (each window a memcpy).
func (g *Gather) RunFromBuffer(source *Buffer, offsets []uint64) (*Buffer, error) {
	p, err := g.h.get()
	if err != nil {
		return nil, err
	}
	bp, err := source.h.get()
	if err != nil {
		return nil, err
	}
	defer runtime.KeepAlive(g)
	defer runtime.KeepAlive(source)
	var id C.uintptr_t
	var msg *C.hf_go_error
	if err := check(C.hf_go_gather_run_from_buffer(p, bp, u64s(offsets), C.size_t(len(offsets)), &id, &msg), msg); err != nil {
		return nil, err
	}
	return newBuffer(id), nil
}

// GatherStream fills batches ahead of the consumer on a worker thread.
type GatherStream struct {
	h      handle
	source interface{} // the View or Buffer read: keeps Go-owned memory under it (OpenMemory's) reachable
}

func (g *Gather) stream(fromBuffer C.int, source C.uintptr_t, src interface{}, offsets []uint64, nBatches, depth int) (*GatherStream, error) {
	p, err := g.h.get()
	if err != nil {
		return nil, err
	}
	defer runtime.KeepAlive(g)
	var id C.uintptr_t
	var msg *C.hf_go_error
	st := C.hf_go_stream_start(p, fromBuffer, source, u64s(offsets), C.size_t(nBatches), C.size_t(depth), &id, &msg)
	if err := check(st, msg); err != nil {
		return nil, err
	}
	s := &GatherStream{h: handle{id: id}, source: src}
	runtime.SetFinalizer(s, (*GatherStream).Close)
	return s, nil
}

// Stream starts nBatches runs over source (offsets: nBatches rows of the gather's batch size, batch after
// batch), up to depth batches ahead; the stream keeps the gather and the source alive.
func (g *Gather) Stream(source *View, offsets []uint64, nBatches, depth int) (*GatherStream, error) {
	vp, err := source.h.get()
	if err != nil {
		return nil, err
	}
	defer runtime.KeepAlive(source)
	return g.stream(0, vp, source, offsets, nBatches, depth)
}

// StreamFromBuffer is Stream over a 1-D host buffer.
func (g *Gather) StreamFromBuffer(source *Buffer, offsets []uint64, nBatches, depth int) (*GatherStream, error) {
	bp, err := source.h.get()
	if err != nil {
		return nil, err
	}
	defer runtime.KeepAlive(source)
	return g.stream(1, bp, source, offsets, nBatches, depth)
}

// Next returns the next batch in order (nil after the last), or the error of a run that failed.
func (s *GatherStream) Next() (*Buffer, error) {
	p, err := s.h.get()
	if err != nil {
		return nil, err
	}
	defer runtime.KeepAlive(s)
	var id C.uintptr_t
	var msg *C.hf_go_error
	if err := check(C.hf_go_stream_next(p, &id, &msg), msg); err != nil {
		return nil, err
	}
	if id == 0 {
		return nil, nil
	}
	return newBuffer(id), nil
}

// Close cancels what remains of the stream; batches already handed out stay valid.
func (s *GatherStream) Close() error {
	runtime.SetFinalizer(s, nil)
	return s.h.release(func(id C.uintptr_t) error {
		var msg *C.hf_go_error
		return check(C.hf_go_stream_free(id, &msg), msg)
	})
}
