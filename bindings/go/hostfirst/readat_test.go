package hostfirst

import (
	"bytes"
	"errors"
	"io"
	"os"
	"testing"
	"testing/iotest"
)

// View.ReadAt honours io.ReaderAt: a read that reaches past the end returns the bytes there are and io.EOF,
// a read at or past the end returns 0 and io.EOF, so that io.SectionReader, io.ReadAll and iotest accept it.
func TestReadAtIsReaderAt(t *testing.T) {
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
	v, err := f.View("tokens")
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	info, err := v.Info()
	if err != nil {
		t.Fatal(err)
	}
	size := int64(info.NBytes)
	want := raw[info.FileOffset : info.FileOffset+info.NBytes]
	var _ io.ReaderAt = v

	// The end of the data, within a longer request: the 8 bytes there are, and io.EOF.
	tail := bytes.Repeat([]byte{0xAA}, 16)
	n, err := v.ReadAt(tail, size-8)
	if n != 8 || err != io.EOF || !bytes.Equal(tail[:8], want[size-8:]) {
		t.Fatalf("ReadAt(16 bytes, size-8): %d, %v, %x", n, err, tail)
	}
	// A request that ends exactly at the end: all of it, and no error.
	if n, err := v.ReadAt(tail[:8], size-8); n != 8 || err != nil {
		t.Fatalf("ReadAt(8 bytes, size-8): %d, %v", n, err)
	}
	// At and past the end: nothing, io.EOF.
	for _, off := range []int64{size, size + 1, size + 1<<40} {
		if n, err := v.ReadAt(tail, off); n != 0 || err != io.EOF {
			t.Fatalf("ReadAt at %d of %d: %d, %v", off, size, n, err)
		}
	}
	if n, err := v.ReadAt(nil, size); n != 0 || err != nil {
		t.Fatalf("an empty read at the end: %d, %v", n, err)
	}
	// A negative offset is an error, not the end of the data.
	if n, err := v.ReadAt(tail, -1); n != 0 || err == nil || err == io.EOF || !errors.Is(err, StatusOutOfRange) {
		t.Fatalf("ReadAt at -1: %d, %v", n, err)
	}

	// Whole reads through the standard library's readers, sections as long as the data and longer.
	for _, limit := range []int64{size, size + 1, 8192 + 4096} {
		got, err := io.ReadAll(io.NewSectionReader(v, 0, limit))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("io.ReadAll(io.NewSectionReader(v, 0, %d)): %d of %d bytes, %v", limit, len(got), size, err)
		}
	}
	// iotest's checks of Read, ReadAt and Seek (a section's end is its own: sections within the data).
	if err := iotest.TestReader(io.NewSectionReader(v, 0, size), want); err != nil {
		t.Fatal(err)
	}
	if err := iotest.TestReader(io.NewSectionReader(v, 1000, size-1000), want[1000:]); err != nil {
		t.Fatal(err)
	}
}
