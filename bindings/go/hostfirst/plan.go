package hostfirst

/*
#cgo pkg-config: hostfirst
#include <stdlib.h>
#include <string.h>
#include <hostfirst.h>
#include "hf_go_error.h"


static hostfirst_status hf_go_rules_new(uintptr_t *out, hf_go_error **err) {
	hostfirst_rules *r = NULL;
	hostfirst_status st = hostfirst_rules_new(&r);
	if (st == HOSTFIRST_STATUS_OK) *out = (uintptr_t)r;
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_rules_add(uintptr_t r, const char *pattern, const char *target, hf_go_error **err) {
	hostfirst_status st = hostfirst_rules_add((hostfirst_rules *)r, pattern, target);
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_rules_add_spec(uintptr_t r, const char *spec, hf_go_error **err) {
	hostfirst_status st = hostfirst_rules_add_spec((hostfirst_rules *)r, spec);
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_rules_free(uintptr_t r, hf_go_error **err) {
	hostfirst_status st = hostfirst_rules_free((hostfirst_rules *)r);
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_plan_make(uintptr_t f, uintptr_t r, uintptr_t *out, hf_go_error **err) {
	hostfirst_plan *p = NULL;
	hostfirst_status st = hostfirst_plan_make((const hostfirst_file *)f, (const hostfirst_rules *)r, &p);
	if (st == HOSTFIRST_STATUS_OK) *out = (uintptr_t)p;
	*err = hf_go_error_take(st);
	return st;
}

// The plan's three lists: which = 0 tensors, 1 devices, 2 unmatched rules.
static hostfirst_status hf_go_plan_count(uintptr_t p, int which, size_t *out, hf_go_error **err) {
	const hostfirst_plan *plan = (const hostfirst_plan *)p;
	hostfirst_status st = which == 0   ? hostfirst_plan_tensor_count(plan, out)
	                      : which == 1 ? hostfirst_plan_device_count(plan, out)
	                                   : hostfirst_plan_unmatched_rule_count(plan, out);
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_plan_tensor(uintptr_t p, size_t i, hostfirst_plan_tensor_info *out, hf_go_error **err) {
	out->struct_size = sizeof *out;
	hostfirst_status st = hostfirst_plan_tensor((const hostfirst_plan *)p, i, out);
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_plan_device(uintptr_t p, size_t i, hostfirst_plan_device_info *out, hf_go_error **err) {
	out->struct_size = sizeof *out;
	hostfirst_status st = hostfirst_plan_device((const hostfirst_plan *)p, i, out);
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_plan_unmatched(uintptr_t p, size_t i, hostfirst_plan_unmatched_rule_info *out,
                                             hf_go_error **err) {
	out->struct_size = sizeof *out;
	hostfirst_status st = hostfirst_plan_unmatched_rule((const hostfirst_plan *)p, i, out);
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_plan_free(uintptr_t p, hf_go_error **err) {
	hostfirst_status st = hostfirst_plan_free((hostfirst_plan *)p);
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_load_run(uintptr_t f, uintptr_t p, int copy_on_write, uint32_t page_cache,
                                       uintptr_t *out, hf_go_error **err) {
	hostfirst_load_options o;
	hostfirst_load *l = NULL;
	hostfirst_status st = hostfirst_load_options_init(&o, sizeof o);
	if (st == HOSTFIRST_STATUS_OK) {
		o.copy_on_write = copy_on_write;
		o.page_cache = (hostfirst_page_cache)page_cache;
		st = hostfirst_load_run((const hostfirst_file *)f, (const hostfirst_plan *)p, &o, &l);
	}
	if (st == HOSTFIRST_STATUS_OK) *out = (uintptr_t)l;
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_load_count(uintptr_t l, size_t *out, hf_go_error **err) {
	hostfirst_status st = hostfirst_load_count((const hostfirst_load *)l, out);
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_load_get(uintptr_t l, const char *name, hostfirst_loaded *kind, uintptr_t *buffer,
                                       uintptr_t *view, hf_go_error **err) {
	hostfirst_buffer *b = NULL;
	hostfirst_view *v = NULL;
	hostfirst_status st = hostfirst_load_get((const hostfirst_load *)l, name, kind, &b, &v);
	if (st == HOSTFIRST_STATUS_OK) {
		*buffer = (uintptr_t)b;
		*view = (uintptr_t)v;
	}
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_load_names(uintptr_t l, char *buf, size_t capacity, size_t *len, hf_go_error **err) {
	hostfirst_status st = hostfirst_load_names((const hostfirst_load *)l, buf, capacity, len);
	*err = st == HOSTFIRST_STATUS_BUFFER_TOO_SMALL ? NULL : hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_load_entries(uintptr_t l, hostfirst_load_entry *out, size_t capacity, size_t *count,
                                           hf_go_error **err) {
	hostfirst_status st = hostfirst_load_entries((const hostfirst_load *)l, out, capacity, sizeof *out, count);
	*err = st == HOSTFIRST_STATUS_BUFFER_TOO_SMALL ? NULL : hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_load_free(uintptr_t l, hf_go_error **err) {
	hostfirst_status st = hostfirst_load_free((hostfirst_load *)l);
	*err = hf_go_error_take(st);
	return st;
}
*/
import "C"

import (
	"fmt"
	"runtime"
	"strings"
	"unsafe"
)

// Rules are placement rules: which tensors (a glob pattern) go to which target ("host", "cuda:0", ...).
type Rules struct{ h handle }

// NewRules makes an empty rule list.
func NewRules() (*Rules, error) {
	if versionErr != nil {
		return nil, versionErr
	}
	var id C.uintptr_t
	var msg *C.hf_go_error
	if err := check(C.hf_go_rules_new(&id, &msg), msg); err != nil {
		return nil, err
	}
	r := &Rules{h: handle{id: id}}
	runtime.SetFinalizer(r, (*Rules).Close)
	return r, nil
}

// Add appends the rule pattern -> target (the first matching rule places a tensor).
func (r *Rules) Add(pattern, target string) error {
	p, err := r.h.get()
	if err != nil {
		return err
	}
	defer runtime.KeepAlive(r)
	cp, ct := C.CString(pattern), C.CString(target)
	defer C.free(unsafe.Pointer(cp))
	defer C.free(unsafe.Pointer(ct))
	var msg *C.hf_go_error
	return check(C.hf_go_rules_add(p, cp, ct, &msg), msg)
}

// AddSpec appends one rule written as "pattern=target" (the CLI's --rule; the last '=' separates them).
func (r *Rules) AddSpec(spec string) error {
	p, err := r.h.get()
	if err != nil {
		return err
	}
	defer runtime.KeepAlive(r)
	cs := C.CString(spec)
	defer C.free(unsafe.Pointer(cs))
	var msg *C.hf_go_error
	return check(C.hf_go_rules_add_spec(p, cs, &msg), msg)
}

// Close frees the rules.
func (r *Rules) Close() error {
	runtime.SetFinalizer(r, nil)
	return r.h.release(func(id C.uintptr_t) error {
		var msg *C.hf_go_error
		return check(C.hf_go_rules_free(id, &msg), msg)
	})
}

// Plan is where each tensor of a file would go under some rules (a dry run: nothing is allocated).
type Plan struct {
	h    handle
	file *File
}

// PlannedTensor is one tensor of a plan.
type PlannedTensor struct {
	Name   string
	OnHost bool // HOSTFIRST_PLACEMENT_HOST: a view of the file; else copied to Device
	Rule   int  // the rule that matched it (-1: none did, and it stays on the host)
	Device Device
	NBytes uint64
}

// PlannedDevice is what a plan puts on one device and whether it fits.
type PlannedDevice struct {
	Device         Device
	Bytes, Tensors uint64
	Usable, Total  uint64
	Fits           bool
}

// UnmatchedRule is a rule that places no tensor, and why.
type UnmatchedRule struct {
	Rule       int
	ShadowedBy int // the earlier rule that takes every tensor it matches (-1: it matches no tensor name)
	Pattern    string
	Target     string
	Tensor     string // a tensor it would have matched ("" when none)
	Message    string
}

// MakePlan plans where each tensor of f goes under r.
func MakePlan(f *File, r *Rules) (*Plan, error) {
	fp, err := f.h.get()
	if err != nil {
		return nil, err
	}
	rp, err := r.h.get()
	if err != nil {
		return nil, err
	}
	defer runtime.KeepAlive(f)
	defer runtime.KeepAlive(r)
	var id C.uintptr_t
	var msg *C.hf_go_error
	if err := check(C.hf_go_plan_make(fp, rp, &id, &msg), msg); err != nil {
		return nil, err
	}
	p := &Plan{h: handle{id: id}, file: f}
	runtime.SetFinalizer(p, (*Plan).Close)
	return p, nil
}

func (p *Plan) count(which C.int) (C.uintptr_t, C.size_t, error) {
	id, err := p.h.get()
	if err != nil {
		return 0, 0, err
	}
	var n C.size_t
	var msg *C.hf_go_error
	if err := check(C.hf_go_plan_count(id, which, &n, &msg), msg); err != nil {
		return 0, 0, err
	}
	return id, n, nil
}

func goDevice(d C.struct_hostfirst_device) Device {
	return Device{Kind: int32(d.kind), Ordinal: int32(d.ordinal)}
}

// Tensors lists the plan's tensors in file order.
func (p *Plan) Tensors() ([]PlannedTensor, error) {
	defer runtime.KeepAlive(p)
	id, n, err := p.count(0)
	if err != nil {
		return nil, err
	}
	out := make([]PlannedTensor, 0, n)
	for i := C.size_t(0); i < n; i++ {
		var info C.hostfirst_plan_tensor_info
		var msg *C.hf_go_error
		if err := check(C.hf_go_plan_tensor(id, i, &info, &msg), msg); err != nil {
			return nil, err
		}
		out = append(out, PlannedTensor{
			Name:   C.GoString(info.name),
			OnHost: info.placement == C.HOSTFIRST_PLACEMENT_HOST,
			Rule:   int(info.rule),
			Device: goDevice(info.device),
			NBytes: uint64(info.nbytes),
		})
	}
	return out, nil
}

// Devices lists what the plan puts on each device.
func (p *Plan) Devices() ([]PlannedDevice, error) {
	defer runtime.KeepAlive(p)
	id, n, err := p.count(1)
	if err != nil {
		return nil, err
	}
	out := make([]PlannedDevice, 0, n)
	for i := C.size_t(0); i < n; i++ {
		var info C.hostfirst_plan_device_info
		var msg *C.hf_go_error
		if err := check(C.hf_go_plan_device(id, i, &info, &msg), msg); err != nil {
			return nil, err
		}
		out = append(out, PlannedDevice{
			Device: goDevice(info.device), Bytes: uint64(info.bytes), Tensors: uint64(info.tensors),
			Usable: uint64(info.usable), Total: uint64(info.total), Fits: info.fits != 0,
		})
	}
	return out, nil
}

// UnmatchedRules lists the rules that place no tensor (check it: a typo sends tensors where other rules say).
func (p *Plan) UnmatchedRules() ([]UnmatchedRule, error) {
	defer runtime.KeepAlive(p)
	id, n, err := p.count(2)
	if err != nil {
		return nil, err
	}
	str := func(s *C.char) string {
		if s == nil {
			return ""
		}
		return C.GoString(s)
	}
	out := make([]UnmatchedRule, 0, n)
	for i := C.size_t(0); i < n; i++ {
		var info C.hostfirst_plan_unmatched_rule_info
		var msg *C.hf_go_error
		if err := check(C.hf_go_plan_unmatched(id, i, &info, &msg), msg); err != nil {
			return nil, err
		}
		out = append(out, UnmatchedRule{
			Rule: int(info.rule), ShadowedBy: int(info.shadowed_by), Pattern: str(info.pattern),
			Target: str(info.target), Tensor: str(info.tensor), Message: str(info.message),
		})
	}
	return out, nil
}

// Close frees the plan.
func (p *Plan) Close() error {
	runtime.SetFinalizer(p, nil)
	return p.h.release(func(id C.uintptr_t) error {
		var msg *C.hf_go_error
		return check(C.hf_go_plan_free(id, &msg), msg)
	})
}

// Load is a whole file placed by a plan: host tensors as views, the others in one allocation per device.
type Load struct {
	h    handle
	file *File
}

// LoadOptions are the options of RunLoad; the zero value copies cpu tensors.
type LoadOptions struct {
	CopyOnWrite bool // cpu tensors as private copy-on-write mappings instead of copies
	// PageCache is what the load leaves in the page cache (1.1): "" or "keep" (the default), "drop" or
	// "bypass" (hostfirst_load_options.page_cache); another value is StatusInvalidArgument naming page_cache.
	PageCache string
}

// pageCacheValue is the hostfirst_page_cache value of a policy name ("" is keep).
func pageCacheValue(policy string) (uint32, error) {
	v, ok := map[string]uint32{"": 0, "keep": 0, "drop": 1, "bypass": 2}[policy]
	if !ok {
		return 0, &Error{Status: StatusInvalidArgument,
			Message: fmt.Sprintf("page_cache %q is not a page-cache policy: keep, drop or bypass", policy)}
	}
	return v, nil
}

// LoadEntry describes one tensor of a load without a handle.
type LoadEntry struct {
	Name     string
	IsBuffer bool // HOSTFIRST_LOADED_BUFFER (else a view)
	DType    uint32
	Device   Device
	Shape    []uint64
	NBytes   uint64
}

// RunLoad loads f as p says.
func RunLoad(f *File, p *Plan, opts *LoadOptions) (*Load, error) {
	fp, err := f.h.get()
	if err != nil {
		return nil, err
	}
	pp, err := p.h.get()
	if err != nil {
		return nil, err
	}
	defer runtime.KeepAlive(f)
	defer runtime.KeepAlive(p)
	cow := C.int(0)
	if opts != nil && opts.CopyOnWrite {
		cow = 1
	}
	policy := uint32(0)
	if opts != nil {
		if policy, err = pageCacheValue(opts.PageCache); err != nil {
			return nil, err
		}
	}
	var id C.uintptr_t
	var msg *C.hf_go_error
	if err := check(C.hf_go_load_run(fp, pp, cow, C.uint32_t(policy), &id, &msg), msg); err != nil {
		return nil, err
	}
	l := &Load{h: handle{id: id}, file: f}
	runtime.SetFinalizer(l, (*Load).Close)
	return l, nil
}

// Count is the number of tensors loaded.
func (l *Load) Count() (int, error) {
	id, err := l.h.get()
	if err != nil {
		return 0, err
	}
	defer runtime.KeepAlive(l)
	var n C.size_t
	var msg *C.hf_go_error
	if err := check(C.hf_go_load_count(id, &n, &msg), msg); err != nil {
		return 0, err
	}
	return int(n), nil
}

// Get hands out tensor name: a new View (placed on the host) or a new Buffer (on a device); the other is nil.
func (l *Load) Get(name string) (*View, *Buffer, error) {
	id, err := l.h.get()
	if err != nil {
		return nil, nil, err
	}
	defer runtime.KeepAlive(l)
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	var kind C.hostfirst_loaded
	var b, v C.uintptr_t
	var msg *C.hf_go_error
	if err := check(C.hf_go_load_get(id, cs, &kind, &b, &v, &msg), msg); err != nil {
		return nil, nil, err
	}
	if kind == C.HOSTFIRST_LOADED_BUFFER {
		return nil, newBuffer(b), nil
	}
	view := &View{h: handle{id: v}, file: l.file}
	runtime.SetFinalizer(view, (*View).Close)
	return view, nil, nil
}

// Names lists the loaded tensors in file order.
func (l *Load) Names() ([]string, error) {
	id, err := l.h.get()
	if err != nil {
		return nil, err
	}
	defer runtime.KeepAlive(l)
	var n C.size_t
	var msg *C.hf_go_error
	if st := C.hf_go_load_names(id, nil, 0, &n, &msg); st != C.HOSTFIRST_STATUS_OK {
		return nil, check(st, msg)
	}
	if n == 0 {
		return []string{}, nil
	}
	buf := make([]byte, int(n))
	if err := check(C.hf_go_load_names(id, (*C.char)(unsafe.Pointer(&buf[0])), n, &n, &msg), msg); err != nil {
		return nil, err
	}
	return strings.Split(strings.TrimSuffix(string(buf[:n]), "\x00"), "\x00"), nil
}

// Entries describes every loaded tensor in file order.
func (l *Load) Entries() ([]LoadEntry, error) {
	id, err := l.h.get()
	if err != nil {
		return nil, err
	}
	defer runtime.KeepAlive(l)
	var n C.size_t
	var msg *C.hf_go_error
	if st := C.hf_go_load_entries(id, nil, 0, &n, &msg); st != C.HOSTFIRST_STATUS_BUFFER_TOO_SMALL {
		if err := check(st, msg); err != nil || n == 0 {
			return []LoadEntry{}, err
		}
	}
	mem := (*C.hostfirst_load_entry)(C.calloc(n, C.sizeof_hostfirst_load_entry))
	defer C.free(unsafe.Pointer(mem))
	if err := check(C.hf_go_load_entries(id, mem, n, &n, &msg), msg); err != nil {
		return nil, err
	}
	out := make([]LoadEntry, 0, n)
	for _, e := range unsafe.Slice(mem, int(n)) {
		out = append(out, LoadEntry{
			Name: C.GoString(e.name), IsBuffer: e.kind == C.HOSTFIRST_LOADED_BUFFER, DType: uint32(e.dtype),
			Device: goDevice(e.device), Shape: shape(e.shape, e.rank), NBytes: uint64(e.nbytes),
		})
	}
	return out, nil
}

// Close frees the load; tensors handed out by Get stay valid until closed.
func (l *Load) Close() error {
	runtime.SetFinalizer(l, nil)
	return l.h.release(func(id C.uintptr_t) error {
		var msg *C.hf_go_error
		return check(C.hf_go_load_free(id, &msg), msg)
	})
}
