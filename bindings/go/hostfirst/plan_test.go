package hostfirst

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
)

// Rules, a plan (tensors, devices, a rule that places nothing) and a whole-file load: host tensors come back
// as views of the file, device tensors as buffers with the same bytes; names and entries in file order.
func TestRulesPlanLoad(t *testing.T) {
	handles(t)
	f, err := Open(fixture(t, "basic.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := NewRules()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := r.Add("i32", "cpu"); err != nil {
		t.Fatal(err)
	}
	for _, spec := range []string{"f3=cpu", "f32=host"} {
		if err := r.AddSpec(spec); err != nil {
			t.Fatal(err)
		}
	}
	wantStatus(t, r.Add("x", "tpu:0"), StatusInvalidArgument, "an unknown target")
	wantStatus(t, r.AddSpec("no equals sign"), StatusInvalidArgument, "a spec without '='")
	p, err := MakePlan(f, r)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	names, _ := f.TensorNames()
	tensors, err := p.Tensors()
	if err != nil || len(tensors) != len(names) {
		t.Fatalf("plan tensors %v %v", tensors, err)
	}
	for i, pt := range tensors {
		if pt.Name != names[i] {
			t.Fatalf("tensor %d is %q, want %q", i, pt.Name, names[i])
		}
		switch pt.Name {
		case "i32":
			if pt.OnHost || pt.Rule != 0 || !pt.Device.IsCPU() || pt.NBytes != 24 {
				t.Fatalf("i32 %+v", pt)
			}
		case "f32":
			if !pt.OnHost || pt.Rule != 2 {
				t.Fatalf("f32 %+v", pt)
			}
		default:
			if !pt.OnHost || pt.Rule != -1 {
				t.Fatalf("%s %+v", pt.Name, pt)
			}
		}
	}
	devices, err := p.Devices()
	if err != nil || len(devices) != 1 || !devices[0].Device.IsCPU() || devices[0].Bytes != 24 ||
		devices[0].Tensors != 1 || !devices[0].Fits {
		t.Fatalf("plan devices %+v %v", devices, err)
	}
	unmatched, err := p.UnmatchedRules()
	if err != nil || len(unmatched) != 1 || unmatched[0].Rule != 1 || unmatched[0].Pattern != "f3" ||
		unmatched[0].ShadowedBy != -1 || unmatched[0].Message == "" {
		t.Fatalf("unmatched rules %+v %v", unmatched, err)
	}

	l, err := RunLoad(f, p, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if n, err := l.Count(); err != nil || n != len(names) {
		t.Fatalf("count %d %v", n, err)
	}
	if got, err := l.Names(); err != nil || !reflect.DeepEqual(got, names) {
		t.Fatalf("names %v %v", got, err)
	}
	entries, err := l.Entries()
	if err != nil || len(entries) != len(names) {
		t.Fatalf("entries %v %v", entries, err)
	}
	for i, e := range entries {
		if e.Name != names[i] || e.IsBuffer != (e.Name == "i32") {
			t.Fatalf("entry %d %+v", i, e)
		}
	}
	want := make([]byte, 24)
	src, _ := f.View("i32")
	defer src.Close()
	if _, err := src.ReadAt(want, 0); err != nil {
		t.Fatal(err)
	}
	v, b, err := l.Get("i32")
	if err != nil || v != nil || b == nil {
		t.Fatalf("get i32 %v %v %v", v, b, err)
	}
	defer b.Close()
	if got, err := b.Bytes(); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("i32 bytes %v %v", got, err)
	}
	v, b, err = l.Get("f32")
	if err != nil || v == nil || b != nil {
		t.Fatalf("get f32 %v %v %v", v, b, err)
	}
	defer v.Close()
	if info, _ := v.Info(); info.Name != "f32" || info.NBytes != 16 {
		t.Fatalf("f32 %+v", info)
	}
	_, _, err = l.Get("missing")
	wantStatus(t, err, StatusNotFound, "a tensor the file lacks")
	l2, err := RunLoad(f, p, &LoadOptions{CopyOnWrite: true})
	if err != nil {
		t.Fatal(err)
	}
	l2.Close()
	// The page-cache policy (1.1): every policy loads the same tensors; another value is refused by name.
	for _, policy := range []string{"keep", "drop", "bypass"} {
		l3, err := RunLoad(f, p, &LoadOptions{PageCache: policy})
		if err != nil {
			t.Fatalf("PageCache %q: %v", policy, err)
		}
		if n, err := l3.Count(); err != nil || n != len(names) {
			t.Fatalf("PageCache %q: %d tensors, %v", policy, n, err)
		}
		l3.Close()
	}
	_, err = RunLoad(f, p, &LoadOptions{PageCache: "evict"})
	wantStatus(t, err, StatusInvalidArgument, "an unknown page-cache policy")
	if err == nil || !strings.Contains(err.Error(), `page_cache "evict"`) {
		t.Fatalf("the refusal names page_cache: %v", err)
	}
}
