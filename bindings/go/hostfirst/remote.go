package hostfirst

/*
#cgo pkg-config: hostfirst
#include <stdlib.h>
#include <hostfirst.h>
#include "hf_go_error.h"

// NULL `reset`-style call when set == 0; otherwise the options filled from the Go values.
static hostfirst_status hf_go_remote_configure(int set, uint32_t max_concurrency, int32_t max_retries,
                                               uint64_t part_size, uint32_t request_timeout_ms,
                                               uint32_t connect_timeout_ms, const char *cache_dir,
                                               uint64_t cache_max_bytes, hf_go_error **err) {
	hostfirst_status st;
	if (!set) {
		st = hostfirst_remote_configure(NULL);
	} else {
		hostfirst_remote_options o;
		st = hostfirst_remote_options_init(&o, sizeof o);
		if (st == HOSTFIRST_STATUS_OK) {
			o.max_concurrency = max_concurrency;
			o.max_retries = max_retries;
			o.part_size = part_size;
			o.request_timeout_ms = request_timeout_ms;
			o.connect_timeout_ms = connect_timeout_ms;
			o.cache_dir = cache_dir;
			o.cache_max_bytes = cache_max_bytes;
			st = hostfirst_remote_configure(&o);
		}
	}
	*err = hf_go_error_take(st);
	return st;
}
*/
import "C"

import (
	"time"
	"unsafe"
)

// RemoteOptions are the process-wide settings of remote sources (s3://, gs://, az://, http(s)://). A zero
// field is not configured: its environment variable decides (HOSTFIRST_REMOTE_CONCURRENCY, _RETRIES,
// _PART_SIZE, _TIMEOUT, _CACHE, _CACHE_MAX_BYTES), else the library's default.
type RemoteOptions struct {
	MaxConcurrency uint32        // concurrent ranged GETs of one read (and parts of one upload); at most 1024
	MaxRetries     int32         // retries of one request; -1: none; at most 100
	PartSize       uint64        // bytes per part of a multipart upload
	RequestTimeout time.Duration // one request (millisecond resolution)
	ConnectTimeout time.Duration // connecting (millisecond resolution)
	CacheDir       string        // the local cache folder, keyed by URL and ETag ("" : none configured)
	CacheMaxBytes  uint64        // bound on the cache folder (least recently used chunks removed past it)
}

func millis(d time.Duration) C.uint32_t {
	ms := d.Milliseconds()
	if d > 0 && ms == 0 {
		ms = 1
	}
	if ms > int64(^uint32(0)) {
		ms = int64(^uint32(0))
	}
	return C.uint32_t(ms)
}

// RemoteConfigure sets the settings of remote sources for the whole process (hostfirst_remote_configure):
// configured values win over the environment variables, which win over the defaults. They apply to opens that
// start after the call. nil returns to the environment and the defaults.
func RemoteConfigure(opts *RemoteOptions) error {
	var msg *C.hf_go_error
	if opts == nil {
		return check(C.hf_go_remote_configure(0, 0, 0, 0, 0, 0, nil, 0, &msg), msg)
	}
	var dir *C.char
	if opts.CacheDir != "" {
		dir = C.CString(opts.CacheDir)
		defer C.free(unsafe.Pointer(dir))
	}
	return check(C.hf_go_remote_configure(1, C.uint32_t(opts.MaxConcurrency), C.int32_t(opts.MaxRetries),
		C.uint64_t(opts.PartSize), millis(opts.RequestTimeout), millis(opts.ConnectTimeout), dir,
		C.uint64_t(opts.CacheMaxBytes), &msg), msg)
}
