package hostfirst

import (
	"os"
	"path/filepath"
	"testing"
)

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
