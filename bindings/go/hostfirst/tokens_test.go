package hostfirst

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func wantStatus(t *testing.T, err error, want Status, what string) {
	t.Helper()
	var he *Error
	if !errors.As(err, &he) || he.Status != want {
		t.Fatalf("%s: got %v, want %s", what, err, want)
	}
}

// tok is the i-th token of the files below.
func tok(i int) uint16 { return uint16(i*7 + 1) }

func tokens(n int) []byte {
	out := make([]byte, 2*n)
	for i := 0; i < n; i++ {
		binary.LittleEndian.PutUint16(out[2*i:], tok(i))
	}
	return out
}

// writeMegatron writes prefix.idx (u16 sequences of the given lengths, document boundaries docs) and prefix.bin.
func writeMegatron(t *testing.T, prefix string, lens []int32, docs []int64, binTokens int) {
	t.Helper()
	var b bytes.Buffer
	b.WriteString("MMIDIDX\x00\x00")
	le := func(v interface{}) { _ = binary.Write(&b, binary.LittleEndian, v) }
	le(uint64(1))
	b.WriteByte(8) // u16
	le(uint64(len(lens)))
	le(uint64(len(docs)))
	le(lens)
	p := int64(0)
	for _, l := range lens {
		le(p)
		p += 2 * int64(l)
	}
	le(docs)
	if err := os.WriteFile(prefix+".idx", b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(prefix+".bin", tokens(binTokens), 0o644); err != nil {
		t.Fatal(err)
	}
}

// Token files: a raw file (OpenRaw, an inferred dimension, an offset), the format names, OpenFormat refusing
// another format, a Megatron dataset's sequence spans and a padded batch of whole sequences.
func TestTokenFiles(t *testing.T) {
	handles(t)
	dir := t.TempDir()
	raw := filepath.Join(dir, "t.bin")
	if err := os.WriteFile(raw, append([]byte("PREFIX.."), tokens(12)...), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := OpenRaw(raw, "U16", []uint64{RawInfer, 4}, 8, "")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if got, err := f.Format(); err != nil || got != FormatRaw || got.String() != "RAW" {
		t.Fatalf("format %v %v", got, err)
	}
	v, err := f.View("data")
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	if info, _ := v.Info(); len(info.Shape) != 2 || info.Shape[0] != 3 || info.Shape[1] != 4 {
		t.Fatalf("shape %v", info.Shape)
	}
	got := make([]byte, 24)
	if _, err := v.ReadAt(got, 0); err != nil || !bytes.Equal(got, tokens(12)) {
		t.Fatalf("raw bytes %v %v", got, err)
	}
	if _, err := OpenRaw(raw, "U16", []uint64{5, 4}, 8, "x"); err == nil {
		t.Fatal("a shape past the file's end must be refused")
	}
	if _, err := OpenRaw(raw, "NOPE", []uint64{RawInfer}, 0, ""); err == nil {
		t.Fatal("an unknown dtype must be refused")
	}
	if _, err := OpenFormat(raw, FormatNPY); err == nil {
		t.Fatal("a raw file is no .npy")
	}
	if Format(999).String() != "UNKNOWN" || FormatMegatron.String() != "MEGATRON" {
		t.Fatal("format names")
	}

	// Megatron: sequences of 3, 0, 5 and 1 tokens in 2 documents.
	prefix := filepath.Join(dir, "mega")
	writeMegatron(t, prefix, []int32{3, 0, 5, 1}, []int64{0, 2, 4}, 9)
	m, err := OpenFormat(prefix, FormatMegatron)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if got, _ := m.Format(); got != FormatMegatron {
		t.Fatalf("format %v", got)
	}
	starts, lengths, err := m.SequenceSpans([]uint64{2, 0, 1})
	if err != nil || starts[0] != 3 || lengths[0] != 5 || starts[1] != 0 || lengths[1] != 3 || lengths[2] != 0 {
		t.Fatalf("spans %v %v %v", starts, lengths, err)
	}
	_, _, err = m.SequenceSpans([]uint64{4})
	wantStatus(t, err, StatusOutOfRange, "a sequence past the end")
	_, _, err = f.SequenceSpans([]uint64{0})
	wantStatus(t, err, StatusUnsupported, "spans of a raw file")

	cpu, _ := ParseDevice("cpu")
	g, err := NewGather(cpu, "U16", 3, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	batch, held, err := g.RunSequences(m, []uint64{2, 0, 1}, 0xFFFF)
	if err != nil {
		t.Fatal(err)
	}
	defer batch.Close()
	if held[0] != 4 || held[1] != 3 || held[2] != 0 {
		t.Fatalf("lengths %v", held)
	}
	rows, err := batch.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	u := func(i int) uint16 { return binary.LittleEndian.Uint16(rows[2*i:]) }
	if u(0) != tok(3) || u(3) != tok(6) || u(4) != tok(0) || u(7) != 0xFFFF || u(8) != 0xFFFF {
		t.Fatalf("rows %v", rows)
	}
	_, _, err = g.RunSequences(m, []uint64{4, 0, 0}, 0)
	wantStatus(t, err, StatusOutOfRange, "a batch with a sequence past the end")
}

// The gather over a safetensors tensor: rows are the windows at the offsets, the current batch is what the
// last run filled, a held batch is never rewritten.
func TestGather(t *testing.T) {
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
	if _, err := v.ReadAt(all, 0); err != nil {
		t.Fatal(err)
	}
	cpu, _ := ParseDevice("cpu")
	g, err := NewGather(cpu, "U16", 2, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	b1, err := g.Run(v, []uint64{0, 100})
	if err != nil {
		t.Fatal(err)
	}
	defer b1.Close()
	want := append(append([]byte{}, all[0:6]...), all[200:206]...)
	if got, err := b1.Bytes(); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("batch %v %v", got, err)
	}
	b2, err := g.Run(v, []uint64{7, 9})
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	cur, err := g.Bytes()
	want2 := append(append([]byte{}, all[14:20]...), all[18:24]...)
	if err != nil || !bytes.Equal(cur, want2) {
		t.Fatalf("current batch %v %v", cur, err)
	}
	if got, _ := b1.Bytes(); !bytes.Equal(got, want) {
		t.Fatal("a held batch changed")
	}
	b3, err := g.Batch()
	if err != nil {
		t.Fatal(err)
	}
	defer b3.Close()
	if got, _ := b3.Bytes(); !bytes.Equal(got, want2) {
		t.Fatal("Batch is not the last run's")
	}
	_, err = g.Run(v, []uint64{4094, 0})
	wantStatus(t, err, StatusOutOfRange, "a window past the end")
	_, err = g.Run(v, []uint64{0})
	wantStatus(t, err, StatusInvalidArgument, "one offset for two rows")
	if _, err := NewGather(cpu, "U16", 0, 3); err == nil {
		t.Fatal("a batch of 0 must be refused")
	}
}

// A file's metadata, path, data size and tensor index; an image in memory; build information, dtype sizes and
// the status range.
func TestFileDetails(t *testing.T) {
	handles(t)
	path := fixture(t, "basic.safetensors")
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	md, err := f.Metadata()
	if err != nil || len(md) != 2 || md[0] != (MetadataEntry{"format", "pt"}) || md[1].Key != "note" {
		t.Fatalf("metadata %v %v", md, err)
	}
	if val, err := f.MetadataValue("note"); err != nil || val != "unicode \u2713 \"quoted\" \\ slash" {
		t.Fatalf("note %q %v", val, err)
	}
	_, err = f.MetadataValue("missing")
	wantStatus(t, err, StatusNotFound, "a missing metadata key")
	if p, err := f.Path(); err != nil || p != path {
		t.Fatalf("path %q %v", p, err)
	}
	// The fixture lies on a local disk or tmpfs: its views are mapped, and the report says so.
	if re, err := f.ReadEngine(); err != nil || !strings.Contains(re, "mapped") {
		t.Fatalf("read engine %q %v", re, err)
	}
	names, _ := f.TensorNames()
	if i, err := f.Find(names[3]); err != nil || i != 3 {
		t.Fatalf("find %d %v", i, err)
	}
	_, err = f.Find("missing")
	wantStatus(t, err, StatusNotFound, "a missing tensor")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n, err := f.DataBytes()
	hlen := binary.LittleEndian.Uint64(data)
	if err != nil || n != uint64(len(data))-8-hlen {
		t.Fatalf("data bytes %d %v", n, err)
	}

	m, err := OpenMemory(data)
	if err != nil {
		t.Fatal(err)
	}
	for i := range data {
		data[i] = 0 // the file has its own copy
	}
	mv, err := m.View("i32")
	if err != nil {
		t.Fatal(err)
	}
	fv, _ := f.View("i32")
	a, b := make([]byte, 24), make([]byte, 24)
	_, _ = fv.ReadAt(a, 0)
	if _, err := mv.ReadAt(b, 0); err != nil || !bytes.Equal(a, b) {
		t.Fatalf("memory view %v %v", b, err)
	}
	_, err = m.Path()
	wantStatus(t, err, StatusNotFound, "the path of a file in memory")
	fv.Close()
	m.Close() // the view keeps the image alive
	if _, err := mv.ReadAt(b, 0); err != nil || !bytes.Equal(a, b) {
		t.Fatal("the view outlives its memory file")
	}
	mv.Close()
	_, err = OpenMemory([]byte("not safetensors at all"))
	if err == nil {
		t.Fatal("garbage must be refused")
	}
	var he *Error
	if !errors.As(err, &he) || !he.Status.IsFormatError() || StatusNotFound.IsFormatError() {
		t.Fatalf("format error range: %v", err)
	}

	info, err := BuildInfo()
	if err != nil || !strings.Contains(info, Version()) {
		t.Fatalf("build info %q %v", info, err)
	}
	for name, bits := range map[string]int{"BF16": 16, "F32": 32, "U8": 8, "F64": 64} {
		if got, err := DTypeBits(name); err != nil || got != bits {
			t.Fatalf("%s: %d bits %v", name, got, err)
		}
	}
	if _, err := DTypeBits("F33"); err == nil {
		t.Fatal("an unknown dtype must be refused")
	}
	if c := StatusCount(); c < 40 || Status(0).String() != "OK" {
		t.Fatalf("status count %d", c)
	}
}

// A tensor written in pieces (bytes, a view, a buffer) into a descriptor and into a path; pieces that do not
// cover the tensor fail the save.
func TestWriterPieces(t *testing.T) {
	handles(t)
	dir := t.TempDir()
	src, err := Open(fixture(t, "basic.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	row, err := src.View("i32") // I32 [2, 3]
	if err != nil {
		t.Fatal(err)
	}
	defer row.Close()
	cpu, _ := ParseDevice("cpu")
	buf, err := row.Put(cpu)
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Close()
	six := make([]byte, 24)
	if _, err := row.ReadAt(six, 0); err != nil {
		t.Fatal(err)
	}
	extra := []byte{9, 0, 0, 0, 8, 0, 0, 0, 7, 0, 0, 0, 6, 0, 0, 0, 5, 0, 0, 0, 4, 0, 0, 0}

	path := filepath.Join(dir, "pieces.safetensors")
	out, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := CreateFD(int(out.Fd()), &WriterOptions{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Declare("big", "I32", []uint64{6, 3}); err != nil {
		t.Fatal(err)
	}
	if err := w.AddPieceView("big", []uint64{0, 0}, row); err != nil {
		t.Fatal(err)
	}
	if err := w.AddPieceBuffer("big", []uint64{2, 0}, buf); err != nil {
		t.Fatal(err)
	}
	if err := w.AddPieceBytes("big", []uint64{4, 0}, []uint64{2, 3}, extra); err != nil {
		t.Fatal(err)
	}
	err = w.AddPieceBytes("big", []uint64{0, 0}, []uint64{2}, extra)
	wantStatus(t, err, StatusInvalidArgument, "start and length of different ranks")
	if info, err := w.Finish(); err != nil || info.Tensors != 1 || len(info.Parts) != 0 {
		t.Fatalf("finish %+v %v", info, err)
	}
	out.Close()
	g, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	gv, err := g.View("big")
	if err != nil {
		t.Fatal(err)
	}
	defer gv.Close()
	got := make([]byte, 72)
	want := append(append(append([]byte{}, six...), six...), extra...)
	if _, err := gv.ReadAt(got, 0); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("pieces read back %v %v", got, err)
	}

	// Rows 2..5 missing: the save fails and leaves no file.
	gap := filepath.Join(dir, "gap.safetensors")
	w2, err := Create(gap, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w2.Close()
	if err := w2.Declare("big", "I32", []uint64{6, 3}); err != nil {
		t.Fatal(err)
	}
	if err := w2.AddPieceView("big", []uint64{0, 0}, row); err != nil {
		t.Fatal(err)
	}
	_, err = w2.Finish()
	wantStatus(t, err, StatusInvalidArgument, "pieces that do not cover the tensor")
	if _, err := os.Stat(gap); !os.IsNotExist(err) {
		t.Fatalf("a failed save left %s (%v)", gap, err)
	}
	_, err = CreateFD(1, &WriterOptions{MaxPartBytes: 1})
	wantStatus(t, err, StatusInvalidArgument, "part files into a descriptor")
}
