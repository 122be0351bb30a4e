//go:build !cgo

package hostfirst

// hostfirst calls the C library through cgo: build with CGO_ENABLED=1 and a C compiler. (This file exists so
// that a build without cgo fails with this name instead of a list of undefined symbols.)
var _ = hostfirst_requires_cgo_set_CGO_ENABLED_1
