package hostfirst

import (
	"bytes"
	"testing"
)

// Views: by index, copies, row slices and narrowing (zero-copy: the bytes of the parent), prefault.
func TestViewsMore(t *testing.T) {
	handles(t)
	f, err := Open(fixture(t, "basic.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	names, _ := f.TensorNames()
	i, _ := f.Find("i32")
	v, err := f.ViewAt(i)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	if info, _ := v.Info(); info.Name != names[i] || info.Name != "i32" {
		t.Fatalf("view at %d: %+v", i, info)
	}
	_, err = f.ViewAt(len(names))
	wantStatus(t, err, StatusOutOfRange, "an index past the last tensor")
	all := make([]byte, 24) // I32 [2, 3]
	if n, err := v.Copy(all); err != nil || n != 24 {
		t.Fatalf("copy %d %v", n, err)
	}
	_, err = v.Copy(make([]byte, 23))
	wantStatus(t, err, StatusBufferTooSmall, "a copy into 23 bytes")
	row, err := v.SliceRows(1, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer row.Close()
	got := make([]byte, 12)
	if n, err := row.Copy(got); err != nil || n != 12 || !bytes.Equal(got, all[12:]) {
		t.Fatalf("row 1: %v %d %v", got, n, err)
	}
	col, err := v.Narrow(1, 2, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer col.Close()
	got = make([]byte, 8)
	want := append(append([]byte{}, all[8:12]...), all[20:24]...)
	if n, err := col.Copy(got); err != nil || n != 8 || !bytes.Equal(got, want) {
		t.Fatalf("column 2: %v %d %v", got, n, err)
	}
	_, err = v.Narrow(1, 2, 2)
	wantStatus(t, err, StatusOutOfRange, "a column range past the end")
	if _, err := v.Prefault(); err != nil {
		t.Fatal(err)
	}
}

// An asynchronous put, devices by spec, a buffer copied to another buffer, the ring and streams of a gather,
// reproducible random offsets.
func TestPutsDevicesStreams(t *testing.T) {
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
	all := make([]byte, 8192)
	if _, err := v.Copy(all); err != nil {
		t.Fatal(err)
	}
	cpu, err := ParseTarget("cpu")
	if err != nil || !cpu.IsCPU() || cpu.String() != "cpu:0" || !cpu.Equal(Device{Kind: cpu.Kind}) {
		t.Fatalf("cpu %+v %q %v", cpu, cpu.String(), err)
	}
	if back, err := ParseDevice(cpu.String()); err != nil || !back.Equal(cpu) {
		t.Fatalf("%q does not parse back: %v", cpu.String(), err)
	}
	if _, err := ParseTarget("tpu:0"); err == nil {
		t.Fatal("an unknown target must be refused")
	}
	if free, total, err := cpu.Memory(); err != nil || total == 0 || free > total {
		t.Fatalf("memory %d of %d: %v", free, total, err)
	}
	if info, err := cpu.Info(); err != nil || !info.Device.Equal(cpu) || info.Name == "" || info.TotalMemory == 0 {
		t.Fatalf("info %+v %v", info, err)
	}

	op, err := v.PutStart(cpu, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer op.Close()
	b, err := op.Wait()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if done, err := op.Poll(); done || err == nil {
		t.Fatalf("poll after the result was taken: %v %v", done, err)
	}
	wantStatus(t, func() error { _, err := op.Wait(); return err }(), StatusAlreadyUsed, "a second wait")
	if got, err := b.Bytes(); err != nil || !bytes.Equal(got, all) {
		t.Fatal("the put's bytes differ")
	}
	if fb, err := b.IsFileBacked(); err != nil || fb {
		t.Fatalf("a copy is not file-backed: %v %v", fb, err)
	}
	b2, err := b.To(cpu)
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	if got, err := b2.Bytes(); err != nil || !bytes.Equal(got, all) {
		t.Fatal("the copied buffer's bytes differ")
	}

	state := uint64(42)
	offs, err := RandomOffsets(&state, 4096, 8, 4)
	if err != nil || state == 42 {
		t.Fatalf("offsets %v %v (state %d)", offs, err, state)
	}
	again := uint64(42)
	if offs2, _ := RandomOffsets(&again, 4096, 8, 4); !equalU64(offs, offs2) || again != state {
		t.Fatal("random offsets are not reproducible")
	}
	for _, o := range offs {
		if o >= 4096-8 {
			t.Fatalf("offset %d out of range", o)
		}
	}
	_, err = RandomOffsets(&state, 8, 8, 1)
	wantStatus(t, err, StatusInvalidArgument, "a window as long as the tensor")

	g, err := NewGather(cpu, "U16", 2, 8)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if err := g.SetRingBound(5); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, g.SetPageCache("evict"), StatusInvalidArgument, "an unknown page-cache policy")
	for _, policy := range []string{"bypass", "drop", "keep"} {
		if err := g.SetPageCache(policy); err != nil {
			t.Fatalf("SetPageCache(%q): %v", policy, err)
		}
	}
	if bound, _, held, err := g.Ring(); err != nil || bound != 5 || held != 0 {
		t.Fatalf("ring %d %d %v", bound, held, err)
	}
	fb, err := g.RunFromBuffer(b, offs[:2])
	if err != nil {
		t.Fatal(err)
	}
	defer fb.Close()
	want := append(append([]byte{}, all[2*offs[0]:2*offs[0]+16]...), all[2*offs[1]:2*offs[1]+16]...)
	if got, _ := fb.Bytes(); !bytes.Equal(got, want) {
		t.Fatal("a batch from a buffer differs")
	}
	if _, _, held, _ := g.Ring(); held != 1 {
		t.Fatalf("held %d, want 1", held)
	}
	for _, fromBuffer := range []bool{false, true} {
		var s *GatherStream
		if fromBuffer {
			s, err = g.StreamFromBuffer(b, offs, 2, 2)
		} else {
			s, err = g.Stream(v, offs, 2, 2)
		}
		if err != nil {
			t.Fatal(err)
		}
		for k := 0; k < 2; k++ {
			batch, err := s.Next()
			if err != nil || batch == nil {
				t.Fatalf("batch %d: %v", k, err)
			}
			got, _ := batch.Bytes()
			w := append(append([]byte{}, all[2*offs[2*k]:2*offs[2*k]+16]...), all[2*offs[2*k+1]:2*offs[2*k+1]+16]...)
			if !bytes.Equal(got, w) {
				t.Fatalf("stream batch %d differs", k)
			}
			batch.Close()
		}
		if end, err := s.Next(); end != nil || err != nil {
			t.Fatalf("past the last batch: %v %v", end, err)
		}
		s.Close()
	}
	_, err = g.Stream(v, offs, 2, 0)
	wantStatus(t, err, StatusInvalidArgument, "a stream of depth 0")
	if err := ReleaseCachedMemory(); err != nil {
		t.Fatal(err)
	}
}

func equalU64(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
