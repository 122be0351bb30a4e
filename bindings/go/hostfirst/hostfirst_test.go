package hostfirst

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// fixture is a file of the repository's test fixtures (tests/fixtures), or HOSTFIRST_FIXTURES/name.
func fixture(t *testing.T, name string) string {
	t.Helper()
	dir := os.Getenv("HOSTFIRST_FIXTURES")
	if dir == "" {
		dir = filepath.Join("..", "..", "..", "tests", "fixtures")
	}
	p, err := filepath.Abs(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// handles checks that a test leaves the library's handle count as it found it.
func handles(t *testing.T) {
	t.Helper()
	before, err := HandleCount()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		after, err := HandleCount()
		if err != nil {
			t.Fatal(err)
		}
		if after != before {
			t.Errorf("handles: %d before, %d after (a handle leaked or was freed twice)", before, after)
		}
	})
}

func TestVersionMatchesHeader(t *testing.T) {
	if VersionNumber() != HeaderVersionNumber {
		t.Fatalf("library %s (%d), header %d", Version(), VersionNumber(), HeaderVersionNumber)
	}
	if !strings.HasPrefix(Version(), "1.") {
		t.Fatalf("version %q", Version())
	}
}

func TestCensus(t *testing.T) {
	backends, err := Backends()
	if err != nil {
		t.Fatal(err)
	}
	var cpu *Backend
	for i := range backends {
		if backends[i].Name == "cpu" {
			cpu = &backends[i]
		}
		if backends[i].Status == "" {
			t.Errorf("backend %q has no status name", backends[i].Name)
		}
	}
	if cpu == nil || !cpu.Available || cpu.Status != "available" || cpu.DeviceCount != 1 {
		t.Fatalf("no available cpu backend with one device in %+v", backends)
	}
	devices, err := Devices()
	if err != nil {
		t.Fatal(err)
	}
	if len(devices) == 0 || !devices[0].IsCPU() || devices[0].Ordinal != 0 {
		t.Fatalf("devices %+v: the host must come first", devices)
	}
}

func TestOpenViewRead(t *testing.T) {
	handles(t)
	path := fixture(t, "tokens.safetensors")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	names, err := f.TensorNames()
	if err != nil || len(names) != 1 || names[0] != "tokens" {
		t.Fatalf("names %v, %v", names, err)
	}
	v, err := f.View("tokens")
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	info, err := v.Info()
	if err != nil {
		t.Fatal(err)
	}
	if info.Name != "tokens" || info.DTypeName != "U16" || len(info.Shape) != 1 || info.Shape[0] != 4096 || info.NBytes != 8192 {
		t.Fatalf("info %+v", info)
	}
	// A read from the middle equals the file's bytes at the tensor's offset.
	got := make([]byte, 100)
	if n, err := v.ReadAt(got, 1000); err != nil || n != 100 {
		t.Fatalf("ReadAt: %d, %v", n, err)
	}
	want := raw[info.FileOffset+1000 : info.FileOffset+1100]
	if !bytes.Equal(got, want) {
		t.Fatalf("ReadAt gave %x, the file has %x", got[:8], want[:8])
	}
	// Reads that reach the end of the data (io.ReaderAt's rules) are TestReadAtIsReaderAt's.
}

func TestPutToCPU(t *testing.T) {
	handles(t)
	f, err := Open(fixture(t, "tokens.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	v, err := f.View("tokens")
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	cpu, err := ParseDevice("cpu")
	if err != nil {
		t.Fatal(err)
	}
	b, err := v.Put(cpu)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	d, err := b.Device()
	if err != nil || d != cpu {
		t.Fatalf("buffer on %+v (%v), want %+v", d, err, cpu)
	}
	got, err := b.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	want := make([]byte, 8192)
	if _, err := v.ReadAt(want, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("the buffer's bytes differ from the view's")
	}
	// The buffer is an owned copy: it outlives the view and the file.
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	again, err := b.Bytes()
	if err != nil || !bytes.Equal(again, want) {
		t.Fatalf("after closing the file: %v", err)
	}
}

func TestErrorsCarryStatusAndMessage(t *testing.T) {
	handles(t)
	missing := filepath.Join(t.TempDir(), "missing.safetensors")
	_, err := Open(missing)
	var e *Error
	if !errors.As(err, &e) || e.Status != StatusIO || !strings.Contains(e.Message, missing) {
		t.Fatalf("opening a missing file: %v", err)
	}
	if e.Status.String() != "IO" || !strings.HasPrefix(err.Error(), "hostfirst: IO: ") {
		t.Fatalf("status name %q, error %q", e.Status, err)
	}

	notSafetensors := filepath.Join(t.TempDir(), "notes.txt")
	if err := os.WriteFile(notSafetensors, []byte("just some text, not a tensor file\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(notSafetensors); !errors.As(err, &e) || e.Status != StatusNotSafetensors {
		t.Fatalf("opening a text file: %v", err)
	}

	f, err := Open(fixture(t, "tokens.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.View("tokenz"); !errors.As(err, &e) || e.Status != StatusNotFound || !strings.Contains(e.Message, "tokenz") {
		t.Fatalf("a missing tensor: %v", err)
	}
	if _, err := ParseDevice("tpu:0"); !errors.As(err, &e) || e.Status != StatusInvalidArgument || !strings.Contains(e.Message, "tpu") {
		t.Fatalf("a bad device spec: %v", err)
	}
}

// The message is read on the thread of the failing call even when goroutines hop threads in between.
func TestErrorsFromManyGoroutines(t *testing.T) {
	done := make(chan error)
	for i := 0; i < 8; i++ {
		go func(i int) {
			for j := 0; j < 50; j++ {
				name := filepath.Join(os.TempDir(), "hostfirst-go-missing", strings.Repeat("x", i+1)+".safetensors")
				_, err := Open(name)
				var e *Error
				if !errors.As(err, &e) || !strings.Contains(e.Message, name) {
					done <- err
					return
				}
				runtime.Gosched()
			}
			done <- nil
		}(i)
	}
	for i := 0; i < 8; i++ {
		if err := <-done; err != nil {
			t.Fatalf("a message that is not this goroutine's: %v", err)
		}
	}
}

func TestCloseIsIdempotentAndUseAfterCloseIsAnError(t *testing.T) {
	handles(t)
	f, err := Open(fixture(t, "tokens.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	v, err := f.View("tokens")
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	if err := v.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := v.Info(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Info after Close: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.View("tokens"); !errors.Is(err, ErrClosed) {
		t.Fatalf("View after Close: %v", err)
	}
}

// Forgotten handles are released by the finalizers.
func TestFinalizersReleaseHandles(t *testing.T) {
	before, err := HandleCount()
	if err != nil {
		t.Fatal(err)
	}
	func() {
		f, err := Open(fixture(t, "tokens.safetensors"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.View("tokens"); err != nil {
			t.Fatal(err)
		}
	}()
	for i := 0; i < 20; i++ {
		runtime.GC()
		if n, _ := HandleCount(); n == before {
			return
		}
	}
	n, _ := HandleCount()
	t.Fatalf("handles: %d before, %d after the garbage collector ran", before, n)
}

// The header's one version rule, through the package: the same ABI line and a library at least as new.
func TestVersionRule(t *testing.T) {
	cases := []struct {
		header, library uint32
		ok              bool
	}{
		{2000, 2000, true}, {2000, 2001, true}, {2001, 2000, false}, {2000, 3000, false},
		{1000000, 1003002, true}, {1003000, 1002009, false}, {1000000, 2000000, false}, {0, 1, false},
	}
	for _, c := range cases {
		if got := versionCompatible(c.header, c.library); got != c.ok {
			t.Errorf("versionCompatible(%d, %d) = %v, want %v", c.header, c.library, got, c.ok)
		}
	}
	if err := CheckVersion(); err != nil {
		t.Fatalf("the installed library does not serve the installed header: %v", err)
	}
	if !versionCompatible(WrittenFor, HeaderVersionNumber) {
		t.Fatalf("the header %d cannot serve this package (written for %d), yet it built", HeaderVersionNumber, WrittenFor)
	}
}

func TestWriterRoundTrip(t *testing.T) {
	handles(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "out.safetensors")
	f, err := Open(fixture(t, "tokens.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	v, err := f.View("tokens")
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	w, err := Create(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	data := []byte{1, 2, 3, 4, 5, 6, 7, 8}
	if err := w.AddBytes("w", "F32", []uint64{2}, data); err != nil {
		t.Fatal(err)
	}
	if err := w.AddView("", v); err != nil {
		t.Fatal(err)
	}
	var he *Error
	if err := w.AddBytes("w", "F32", []uint64{2}, data); !errors.As(err, &he) || he.Status != StatusDuplicateTensor {
		t.Fatalf("a duplicate name: %v", err)
	}
	if err := w.AddBytes("bad", "F32", []uint64{3}, data); !errors.As(err, &he) || he.Status != StatusInvalidArgument {
		t.Fatalf("a shape that is not the bytes: %v", err)
	}
	if err := w.SetMetadata([]MetadataEntry{{"format", "go"}}); err != nil {
		t.Fatal(err)
	}
	data[0] = 99 // copied already: the file holds 1
	info, err := w.Finish()
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Parts) != 1 || info.Parts[0] != path || info.Tensors != 2 || info.Index != "" {
		t.Fatalf("info %+v", info)
	}
	if _, err := w.Finish(); !errors.As(err, &he) || he.Status != StatusAlreadyUsed {
		t.Fatalf("finish twice: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	g, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	gw, err := g.View("w")
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Close()
	got := make([]byte, 8)
	if _, err := gw.ReadAt(got, 0); err != nil || !bytes.Equal(got, []byte{1, 2, 3, 4, 5, 6, 7, 8}) {
		t.Fatalf("read back %v %v", got, err)
	}
	gt, err := g.View("tokens")
	if err != nil {
		t.Fatal(err)
	}
	defer gt.Close()
	a, b := make([]byte, 8192), make([]byte, 8192)
	if _, err := gt.ReadAt(a, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := v.ReadAt(b, 0); err != nil || !bytes.Equal(a, b) {
		t.Fatal("the view's bytes differ")
	}
	if _, err := Create(filepath.Join(dir, "missing", "x.safetensors"), nil); err == nil {
		t.Fatal("a missing directory must be refused")
	}
}
