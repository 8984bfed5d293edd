package operator

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// A character split across two writes is escaped whole; a line break and
// a tab pass; an incomplete character left at the end is written, escaped,
// by Flush.
func TestTextWriterEscapesAcrossWrites(t *testing.T) {
	var buf bytes.Buffer
	w := newTextWriter(&buf)
	csi := "\u009b" // two bytes in UTF-8
	rlo := "\u202e" // three
	for _, p := range []string{"a" + csi[:1], csi[1:] + "2J\tb\n" + rlo[:2], rlo[2:] + "c\x1b[1A\r\n", "é" + csi[:1]} {
		if n, err := w.Write([]byte(p)); n != len(p) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", p, n, err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if got, want := buf.String(), `a\u009b2J`+"\tb\n"+`\u202ec\x1b[1A\r`+"\n"+`é\xc2`; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// printJSON's output holds no DEL, C1 or bidirectional character raw, and
// decodes to the values given.
func TestPrintJSONIsExactAndPrintable(t *testing.T) {
	in := map[string]string{
		"c0": "\x1b]0;t\x07\n", "del": "\x7f", "c1": "\u0085\u009b2J", "bidi": "a\u202eb\u2066c\u2069\u200f\u061c",
		"ls": "\u2028\u2029", "plain": `text é 注 \u009b`, "key\x1b": "v",
	}
	var buf bytes.Buffer
	a := &App{Out: &buf}
	if err := a.printJSON(in); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	if printableText(out) != out {
		t.Fatalf("printJSON wrote characters a terminal acts on: %q", out)
	}
	var back map[string]string
	if err := json.Unmarshal(buf.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	for k, v := range in {
		if back[k] != v {
			t.Errorf("%q: %q came back as %q", k, v, back[k])
		}
	}
	if !strings.Contains(out, `"c1": "\u0085\u009b2J"`) {
		t.Errorf("C1 not escaped as JSON: %s", out)
	}
}
