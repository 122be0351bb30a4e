package hostfirst

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRemoteURL: Open takes a URL (http://, https://, s3://, gs://, az://) where it takes a path; the object is
// read with ranged GETs, and its views read with ReadAt or Put like a local file's. The Rust harness
// (tests/it/go.rs) starts the fault-injecting server of tests/remote on loopback and passes
// HOSTFIRST_REMOTE_BASE (a URL ending in "/") and HOSTFIRST_REMOTE_DIR (the folder of the files it serves).
func TestRemoteURL(t *testing.T) {
	base, dir := os.Getenv("HOSTFIRST_REMOTE_BASE"), os.Getenv("HOSTFIRST_REMOTE_DIR")
	if base == "" || dir == "" {
		t.Skip("HOSTFIRST_REMOTE_BASE and HOSTFIRST_REMOTE_DIR are unset (tests/it/go.rs sets them)")
	}
	handles(t)
	local, err := Open(filepath.Join(dir, "small.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	remote, err := Open(base + "small.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	defer remote.Close()
	names, err := remote.TensorNames()
	if err != nil {
		t.Fatal(err)
	}
	want, err := local.TensorNames()
	if err != nil || strings.Join(names, ",") != strings.Join(want, ",") || len(names) == 0 {
		t.Fatalf("remote names %v, local %v (%v)", names, want, err)
	}
	cpu, err := ParseDevice("cpu")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		lv, err := local.View(name)
		if err != nil {
			t.Fatal(err)
		}
		rv, err := remote.View(name)
		if err != nil {
			t.Fatal(err)
		}
		info, err := rv.Info()
		if err != nil {
			t.Fatal(err)
		}
		exp := make([]byte, info.NBytes)
		if _, err := lv.ReadAt(exp, 0); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, info.NBytes)
		if n, err := rv.ReadAt(got, 0); err != nil || n != len(got) {
			t.Fatalf("%s: ReadAt: %d, %v", name, n, err)
		}
		if !bytes.Equal(got, exp) {
			t.Fatalf("%s: the remote bytes differ from the file's", name)
		}
		b, err := rv.Put(cpu)
		if err != nil {
			t.Fatal(err)
		}
		put, err := b.Bytes()
		if err != nil || !bytes.Equal(put, exp) {
			t.Fatalf("%s: Put to cpu: %v (equal: %v)", name, err, bytes.Equal(put, exp))
		}
		for _, c := range []interface{ Close() error }{b, rv, lv} {
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A missing object is StatusNotFound, its message naming the URL.
	_, err = Open(base + "none.safetensors")
	var he *Error
	if !errors.Is(err, StatusNotFound) || !errors.As(err, &he) || !strings.Contains(he.Message, base+"none.safetensors") {
		t.Fatalf("a missing object: %v", err)
	}
}

func TestRemoteConfigure(t *testing.T) {
	defer RemoteConfigure(nil)
	wantStatus(t, RemoteConfigure(&RemoteOptions{MaxRetries: -2}), StatusInvalidArgument, "max_retries -2")
	wantStatus(t, RemoteConfigure(&RemoteOptions{MaxConcurrency: 5000}), StatusInvalidArgument, "max_concurrency 5000")
	dir := filepath.Join(t.TempDir(), "cache")
	if err := RemoteConfigure(&RemoteOptions{MaxRetries: -1, CacheDir: dir}); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		t.Fatalf("the cache folder was not made: %v", err)
	}
	// Nothing listens on port 1: refused at once, and with no retries the open gives up after one try.
	_, err := Open("http://127.0.0.1:1/x.safetensors")
	wantStatus(t, err, StatusIO, "a refused connection")
	if err := RemoteConfigure(nil); err != nil {
		t.Fatal(err)
	}
}
