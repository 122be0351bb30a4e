package hostfirst

/*
#cgo pkg-config: hostfirst
#include <stdlib.h>
#include <string.h>
#include <hostfirst.h>
#include "hf_go_error.h"


static hostfirst_status hf_go_default_device(hostfirst_device *d, hostfirst_default_source *src, uint32_t *depth,
                                             hf_go_error **err) {
	hostfirst_status st = hostfirst_default_device(d, src, depth);
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_default_set(hostfirst_device d, hf_go_error **err) {
	hostfirst_status st = hostfirst_default_device_set(d);
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_default_clear(hf_go_error **err) {
	hostfirst_status st = hostfirst_default_device_clear();
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_default_resolve(hostfirst_device *d, hf_go_error **err) {
	hostfirst_status st = hostfirst_default_resolve(d);
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_scope_push(hostfirst_device d, uint64_t *token, hf_go_error **err) {
	hostfirst_status st = hostfirst_scope_push(d, token);
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_scope_pop(uint64_t token, hf_go_error **err) {
	hostfirst_status st = hostfirst_scope_pop(token);
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_scope_capture(hostfirst_carried_scope *out, hf_go_error **err) {
	hostfirst_status st = hostfirst_scope_capture(out);
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_scope_enter(hostfirst_carried_scope c, uint64_t *token, hf_go_error **err) {
	hostfirst_status st = hostfirst_scope_enter(&c, token);
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_scope_leave(uint64_t token, hf_go_error **err) {
	hostfirst_status st = hostfirst_scope_leave(token);
	*err = hf_go_error_take(st);
	return st;
}

// which = 0: this thread, 1: the process.
static hostfirst_status hf_go_strict_set(int which, int32_t on, hf_go_error **err) {
	hostfirst_status st = which ? hostfirst_strict_process_set(on) : hostfirst_strict_thread_set(on);
	*err = hf_go_error_take(st);
	return st;
}

static hostfirst_status hf_go_strict_get(int32_t *thread, int32_t *process, hf_go_error **err) {
	hostfirst_status st = hostfirst_strict_get(thread, process);
	*err = hf_go_error_take(st);
	return st;
}

*/
import "C"

import "runtime"

// DefaultSource says where the default device came from (a hostfirst_default_source).
type DefaultSource uint32

// String is the library's name of the source, such as "BUILT_IN".
func (s DefaultSource) String() string {
	return C.GoString(C.hostfirst_default_source_name(C.hostfirst_default_source(s)))
}

// The default device's sources, innermost first.
const (
	DefaultFromScope   DefaultSource = C.HOSTFIRST_DEFAULT_SOURCE_SCOPE
	DefaultFromProcess DefaultSource = C.HOSTFIRST_DEFAULT_SOURCE_PROCESS
	DefaultFromEnv     DefaultSource = C.HOSTFIRST_DEFAULT_SOURCE_ENV
	DefaultBuiltIn     DefaultSource = C.HOSTFIRST_DEFAULT_SOURCE_BUILT_IN
)

// The library's default device and strict mode are per OS thread (scopes, the thread's strict flag) or per
// process. A goroutine may change threads between two calls, so the per-thread state is reachable here only
// through functions that lock the goroutine to its thread for the duration of fn: WithDefaultDevice,
// WithStrict and CarriedScope.Run. Outside them a goroutine sees the process setting (or whatever its current
// thread holds: nothing, unless C code set it).

// DefaultDevice is the device "default" means on the calling thread now, where it comes from, and how many
// scopes the thread has.
func DefaultDevice() (Device, DefaultSource, int, error) {
	var d C.hostfirst_device
	var src C.hostfirst_default_source
	var depth C.uint32_t
	var msg *C.hf_go_error
	if err := check(C.hf_go_default_device(&d, &src, &depth, &msg), msg); err != nil {
		return Device{}, 0, 0, err
	}
	return goDevice(d), DefaultSource(src), int(depth), nil
}

// SetDefaultDevice makes d the process-wide default device (scopes still take precedence).
func SetDefaultDevice(d Device) error {
	var msg *C.hf_go_error
	return check(C.hf_go_default_set(d.c(), &msg), msg)
}

// ClearDefaultDevice removes the process-wide default (the environment or the built-in rule applies again).
func ClearDefaultDevice() error {
	var msg *C.hf_go_error
	return check(C.hf_go_default_clear(&msg), msg)
}

// ResolveDefault resolves "the default device" as a placement would: StatusImplicitPlacement in strict mode.
func ResolveDefault() (Device, error) {
	var d C.hostfirst_device
	var msg *C.hf_go_error
	if err := check(C.hf_go_default_resolve(&d, &msg), msg); err != nil {
		return Device{}, err
	}
	return goDevice(d), nil
}

// WithDefaultDevice runs fn with d as the default device of the goroutine's thread (a scope pushed before and
// popped after, the goroutine locked to its thread meanwhile), and returns fn's error, or the scope's.
func WithDefaultDevice(d Device, fn func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var token C.uint64_t
	var msg *C.hf_go_error
	if err := check(C.hf_go_scope_push(d.c(), &token, &msg), msg); err != nil {
		return err
	}
	ferr := fn()
	if err := check(C.hf_go_scope_pop(token, &msg), msg); err != nil && ferr == nil {
		return err
	}
	return ferr
}

// SetStrictProcess turns strict mode on or off for the whole process.
func SetStrictProcess(on bool) error {
	v := C.int32_t(0)
	if on {
		v = 1
	}
	var msg *C.hf_go_error
	return check(C.hf_go_strict_set(1, v, &msg), msg)
}

func strictGet() (thread, process bool, err error) {
	var t, p C.int32_t
	var msg *C.hf_go_error
	if err := check(C.hf_go_strict_get(&t, &p, &msg), msg); err != nil {
		return false, false, err
	}
	return t == 1, p == 1, nil
}

// StrictProcess reports whether strict mode is on for the whole process.
func StrictProcess() (bool, error) {
	_, p, err := strictGet()
	return p, err
}

// WithStrict runs fn in strict mode on the goroutine's thread (locked to it meanwhile): resolving the implicit
// default device fails with StatusImplicitPlacement. The thread's flag is restored afterwards.
func WithStrict(fn func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	prev, _, err := strictGet()
	if err != nil {
		return err
	}
	var msg *C.hf_go_error
	if err := check(C.hf_go_strict_set(0, 1, &msg), msg); err != nil {
		return err
	}
	ferr := fn()
	back := C.int32_t(0)
	if prev {
		back = 1
	}
	if err := check(C.hf_go_strict_set(0, back, &msg), msg); err != nil && ferr == nil {
		return err
	}
	return ferr
}

// CarriedScope is a thread's effective default device and strict flag, captured to be entered elsewhere.
type CarriedScope struct {
	Device Device
	Strict bool
}

// CaptureScope captures the calling thread's effective default device and strict flag (call it inside
// WithDefaultDevice / WithStrict to carry those).
func CaptureScope() (CarriedScope, error) {
	var c C.hostfirst_carried_scope
	var msg *C.hf_go_error
	if err := check(C.hf_go_scope_capture(&c, &msg), msg); err != nil {
		return CarriedScope{}, err
	}
	return CarriedScope{Device: goDevice(c.device), Strict: c.strict == 1}, nil
}

// Run runs fn with the carried scope entered on the goroutine's thread (locked to it meanwhile).
func (s CarriedScope) Run(fn func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	c := C.hostfirst_carried_scope{device: s.Device.c()}
	if s.Strict {
		c.strict = 1
	}
	var token C.uint64_t
	var msg *C.hf_go_error
	if err := check(C.hf_go_scope_enter(c, &token, &msg), msg); err != nil {
		return err
	}
	ferr := fn()
	if err := check(C.hf_go_scope_leave(token, &msg), msg); err != nil && ferr == nil {
		return err
	}
	return ferr
}
