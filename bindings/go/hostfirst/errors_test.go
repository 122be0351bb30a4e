package hostfirst

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// Every Status constant has the value of the C header's constant of the same name (compared through cgo),
// the library's name for that value, and the library defines no status the package lacks.
func TestStatusesMatchTheHeader(t *testing.T) {
	seen := map[Status]string{}
	for _, s := range statusesC {
		if uint32(s.status) != uint32(s.c) {
			t.Errorf("%s: the package says %d, hostfirst.h %d", s.name, uint32(s.status), uint32(s.c))
		}
		if got := s.status.String(); got != s.name {
			t.Errorf("status %d: the library calls it %s, the package %s", uint32(s.status), got, s.name)
		}
		if other, dup := seen[s.status]; dup {
			t.Errorf("%s and %s share the value %d", other, s.name, uint32(s.status))
		}
		seen[s.status] = s.name
	}
	if len(seen) != StatusCount() {
		t.Errorf("the package has %d statuses, the library defines %d", len(seen), StatusCount())
	}
	for v := Status(0); v < 1024; v++ {
		if _, ok := seen[v]; !ok && v.String() != "UNKNOWN" {
			t.Errorf("the library defines status %d (%s), the package has no constant for it", uint32(v), v)
		}
	}
}

// errors.Is(err, StatusX) finds the status of a failed call, also through wrapping; a Status is an error
// whose text is its name.
func TestErrorsIsStatus(t *testing.T) {
	_, err := Open(filepath.Join(t.TempDir(), "absent.safetensors"))
	var he *Error
	if !errors.As(err, &he) {
		t.Fatalf("opening a missing file: %v", err)
	}
	if !errors.Is(err, he.Status) || he.Status == StatusOK {
		t.Fatalf("errors.Is(err, %v) is false for %v", he.Status, err)
	}
	wrapped := fmt.Errorf("loading the model: %w", err)
	if !errors.Is(wrapped, he.Status) {
		t.Fatalf("errors.Is through %%w is false: %v", wrapped)
	}
	if errors.Is(err, StatusOutOfMemory) || errors.Is(err, ErrClosed) {
		t.Fatalf("errors.Is matches another status: %v", err)
	}
	f, err := Open(fixture(t, "basic.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	_, err = f.View("no such tensor")
	if !errors.Is(err, StatusNotFound) || errors.Is(err, StatusOutOfRange) {
		t.Fatalf("a missing tensor: %v", err)
	}
	var s error = StatusNotFound
	if s.Error() != "NOT_FOUND" || fmt.Sprint(StatusNotFound) != "NOT_FOUND" {
		t.Fatalf("a Status prints as %q / %q", s.Error(), fmt.Sprint(StatusNotFound))
	}
	if he.Error() != fmt.Sprintf("hostfirst: %s: %s", he.Status, he.Message) {
		t.Fatalf("an *Error prints as %q", he.Error())
	}
}

// hugeView is the one tensor of a 1 TiB sparse raw file: no host has that much free memory, so a copy of it
// to cpu is refused by the fit check before anything is allocated.
func hugeView(t *testing.T) (*File, *View) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "huge.bin")
	hf, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := hf.Truncate(1 << 40); err != nil {
		hf.Close()
		t.Skipf("no sparse 1 TiB file here: %v", err)
	}
	hf.Close()
	f, err := OpenRaw(path, "U8", []uint64{RawInfer}, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	v, err := f.View("data")
	if err != nil {
		f.Close()
		t.Fatal(err)
	}
	return f, v
}

// wantFit checks that err is a refusal of the fit check for 1 TiB on the host, with its numbers in Fit.
func wantFit(t *testing.T, err error, what string) {
	t.Helper()
	var he *Error
	if !errors.As(err, &he) || he.Status != StatusOutOfMemory {
		t.Fatalf("%s: %v", what, err)
	}
	if he.Fit == nil {
		t.Fatalf("%s: refused by the fit check, but Error.Fit is nil: %v", what, err)
	}
	if he.Fit.Needed != 1<<40 || he.Fit.Free >= he.Fit.Needed || he.Fit.Total == 0 || !he.Fit.Device.IsCPU() {
		t.Fatalf("%s: fit %+v", what, *he.Fit)
	}
}

// Error.Fit is filled for every call the fit check refuses, not only View.Put: a whole-file load and an
// asynchronous put too; and it is nil for a failure that is no fit check.
func TestFitOnEveryRefusal(t *testing.T) {
	handles(t)
	f, v := hugeView(t)
	defer f.Close()
	defer v.Close()
	cpu, _ := ParseDevice("cpu")

	_, err := v.Put(cpu)
	wantFit(t, err, "a put of 1 TiB")

	r, err := NewRules()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := r.Add("data", "cpu"); err != nil {
		t.Fatal(err)
	}
	p, err := MakePlan(f, r)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	_, err = RunLoad(f, p, nil)
	wantFit(t, err, "a load of 1 TiB")

	op, err := v.PutStart(cpu, 1)
	if err == nil {
		_, err = op.Wait()
		op.Close()
	}
	wantFit(t, err, "an asynchronous put of 1 TiB")

	_, err = f.View("absent")
	var he *Error
	if !errors.As(err, &he) || he.Status != StatusNotFound || he.Fit != nil {
		t.Fatalf("a failure that is no fit check carries no numbers: %v", err)
	}
}
