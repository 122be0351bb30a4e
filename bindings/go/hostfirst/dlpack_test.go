package hostfirst

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"unsafe"
)

// DLPack exports of a view and a buffer (shape, the bytes at Data, the deleter run by Close), DLPack dtypes,
// the stream handshake on a host buffer, and the numbers of a refused fit check.
func TestDLPackStreamsFit(t *testing.T) {
	handles(t)
	f, err := Open(fixture(t, "basic.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	v, err := f.View("i32")
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	want := make([]byte, 24)
	if _, err := v.ReadAt(want, 0); err != nil {
		t.Fatal(err)
	}
	cpu, _ := ParseDevice("cpu")
	b, err := v.Put(cpu)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for _, export := range []func() (*DLPackTensor, error){v.DLPack, b.DLPack} {
		before, _ := HandleCount()
		d, err := export()
		if err != nil {
			t.Fatal(err)
		}
		if s := d.Shape(); len(s) != 2 || s[0] != 2 || s[1] != 3 {
			t.Fatalf("shape %v", s)
		}
		if got := unsafe.Slice((*byte)(d.Data()), 24); !bytes.Equal(got, want) {
			t.Fatalf("exported bytes %v", got)
		}
		if n, _ := HandleCount(); n != before+1 {
			t.Fatalf("an export is a live handle: %d before, %d with it", before, n)
		}
		d.Close()
		d.Close() // once
		if n, _ := HandleCount(); n != before {
			t.Fatalf("Close did not run the deleter: %d before, %d after", before, n)
		}
	}
	if code, bits, lanes, err := DLPackDType("F32"); err != nil || code != 2 || bits != 32 || lanes != 1 {
		t.Fatalf("F32 as DLPack: %d %d %d %v", code, bits, lanes, err)
	}
	if code, bits, _, err := DLPackDType("BF16"); err != nil || code != 4 || bits != 16 {
		t.Fatalf("BF16 as DLPack: %d %d %v", code, bits, err)
	}

	for _, s := range []int64{-1, 1, 2} {
		if err := b.SyncStream(s); err != nil {
			t.Fatalf("sync_stream(%d) on a host buffer: %v", s, err)
		}
		if err := b.RecordStream(s); err != nil {
			t.Fatalf("record_stream(%d) on a host buffer: %v", s, err)
		}
	}
	wantStatus(t, b.SyncStream(0), StatusInvalidArgument, "stream 0")
	wantStatus(t, b.RecordStream(-2), StatusInvalidArgument, "stream -2")

	// A 1 TiB sparse file: no host has that much free memory, so the put is refused before allocating.
	huge := filepath.Join(t.TempDir(), "huge.bin")
	hf, err := os.Create(huge)
	if err != nil {
		t.Fatal(err)
	}
	if err := hf.Truncate(1 << 40); err != nil {
		t.Skipf("no sparse 1 TiB file here: %v", err)
	}
	hf.Close()
	big, err := OpenRaw(huge, "U8", []uint64{RawInfer}, 0, "")
	if err != nil {
		t.Fatal(err)
	}
	defer big.Close()
	bv, err := big.View("data")
	if err != nil {
		t.Fatal(err)
	}
	defer bv.Close()
	_, err = bv.Put(cpu)
	var he *Error
	if !errors.As(err, &he) || he.Status != StatusOutOfMemory || he.Fit == nil {
		t.Fatalf("a 1 TiB put: %v", err)
	}
	if he.Fit.Needed != 1<<40 || he.Fit.Free >= he.Fit.Needed || he.Fit.Total == 0 || !he.Fit.Device.IsCPU() {
		t.Fatalf("fit %+v", *he.Fit)
	}
	if _, err := v.Put(Device{Kind: 2, Ordinal: 7}); !errors.As(err, &he) || he.Fit != nil {
		t.Fatalf("a failure that is no fit check carries no numbers: %v", err)
	}
}
