package hostfirst

import (
	"errors"
	"testing"
)

// The default device and strict mode: the process setting, a scope on the goroutine's locked thread, strict
// mode on the thread and the process, and a scope carried to another goroutine.
func TestDefaultsAndScopes(t *testing.T) {
	cpu, _ := ParseDevice("cpu")
	d, src, depth, err := DefaultDevice()
	if err != nil || src.String() == "UNKNOWN" || src == DefaultFromScope || src == DefaultFromProcess || depth != 0 {
		t.Fatalf("default %v %v %d %v", d, src, depth, err)
	}
	if DefaultSource(99).String() != "UNKNOWN" || DefaultBuiltIn.String() != "BUILT_IN" {
		t.Fatal("source names")
	}
	if err := SetDefaultDevice(cpu); err != nil {
		t.Fatal(err)
	}
	if d, src, _, err := DefaultDevice(); err != nil || src != DefaultFromProcess || !d.Equal(cpu) {
		t.Fatalf("process default %v %v %v", d, src, err)
	}
	if err := ClearDefaultDevice(); err != nil {
		t.Fatal(err)
	}
	if _, src, _, _ := DefaultDevice(); src == DefaultFromProcess {
		t.Fatal("the process default was not cleared")
	}

	var carried CarriedScope
	called := false
	err = WithDefaultDevice(cpu, func() error {
		called = true
		d, src, depth, err := DefaultDevice()
		if err != nil || src != DefaultFromScope || depth != 1 || !d.Equal(cpu) {
			t.Errorf("in the scope: %v %v %d %v", d, src, depth, err)
		}
		return WithStrict(func() error {
			_, err := ResolveDefault()
			wantStatus(t, err, StatusImplicitPlacement, "resolving the default in strict mode")
			carried, err = CaptureScope()
			return err
		})
	})
	if err != nil || !called || !carried.Strict || !carried.Device.Equal(cpu) {
		t.Fatalf("scope %v %v %+v", err, called, carried)
	}
	mine := errors.New("from fn")
	if err := WithDefaultDevice(cpu, func() error { return mine }); err != mine {
		t.Fatalf("fn's error is returned: %v", err)
	}
	called = false
	if err := WithDefaultDevice(Device{Kind: 2, Ordinal: 7}, func() error { called = true; return nil }); err == nil || called {
		t.Fatalf("a scope on an absent device: %v (fn called: %v)", err, called)
	}

	done := make(chan error)
	go func() {
		done <- carried.Run(func() error {
			_, err := ResolveDefault()
			wantStatus(t, err, StatusImplicitPlacement, "strict mode carried to another goroutine")
			_, src, _, err := DefaultDevice()
			if err != nil || src != DefaultFromScope {
				t.Errorf("carried scope: %v %v", src, err)
			}
			return nil
		})
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := ResolveDefault(); err != nil {
		t.Fatalf("strict mode leaked out of its scope: %v", err)
	}

	if err := SetStrictProcess(true); err != nil {
		t.Fatal(err)
	}
	on, err := StrictProcess()
	_, rerr := ResolveDefault()
	if err := SetStrictProcess(false); err != nil {
		t.Fatal(err)
	}
	if !on || err != nil {
		t.Fatalf("strict process %v %v", on, err)
	}
	wantStatus(t, rerr, StatusImplicitPlacement, "resolving the default with the process strict")
	if on, _ := StrictProcess(); on {
		t.Fatal("strict mode stayed on")
	}
}
