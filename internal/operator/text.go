package operator

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/effectively-once/webhooks/internal/ledger"
)

// What webhookctl prints comes in part from senders: event ids, types,
// delivery ids, subjects, attributes, payload keys and bodies, error
// messages. None of it may act on the operator's terminal (ESC and C1
// sequences set its title, erase or move lines) or reorder the text
// around it (bidirectional overrides). Three layers see to that:
//
//   - safe escapes one value (ledger.Printable: \x1b, \n, \u009b,
//     \u202e); table and printLines apply it to every cell and value, so a
//     new column or line cannot forget it, and a line break in a value
//     cannot forge a row or a line;
//   - newTextWriter wraps stdout and stderr in Run and escapes the same
//     characters, but line breaks and tabs, in everything that reaches
//     them: whatever a new output path forgets, no control character
//     reaches the terminal;
//   - printJSON writes exact JSON: the same values, decoded, as stored;
//     encoding/json escapes C0 controls (and U+2028, U+2029) but writes
//     DEL, C1 and the bidirectional characters raw, so printJSON writes
//     those as \u escapes too, which JSON decoders read back as the same
//     characters.

// safe is s as one printable line: every character that could act on a
// terminal, break the line or reorder the text around it is escaped.
func safe(s string) string { return ledger.Printable(s) }

// printableText is safe, except that it keeps line breaks and tabs: for
// text of several lines (a payload body) and whole output streams.
func printableText(s string) string {
	var b strings.Builder
	start := 0
	for i := 0; i < len(s); i++ {
		// '\n' and '\t' are never part of a multi-byte UTF-8 sequence.
		if s[i] == '\n' || s[i] == '\t' {
			b.WriteString(ledger.Printable(s[start:i]))
			b.WriteByte(s[i])
			start = i + 1
		}
	}
	if start == 0 {
		return ledger.Printable(s)
	}
	b.WriteString(ledger.Printable(s[start:]))
	return b.String()
}

// textWriter passes everything written to it through printableText. A
// character split across two writes is held until the second.
type textWriter struct {
	w    io.Writer
	tail []byte
}

// newTextWriter returns w escaping every character that could act on a
// terminal except line breaks and tabs. Flush writes a held incomplete
// character (escaped) at the end.
func newTextWriter(w io.Writer) *textWriter { return &textWriter{w: w} }

func (t *textWriter) Write(p []byte) (int, error) {
	buf := append(t.tail, p...)
	cut := completeUpTo(buf)
	t.tail = append([]byte(nil), buf[cut:]...)
	if _, err := io.WriteString(t.w, printableText(string(buf[:cut]))); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush writes what a last write left incomplete.
func (t *textWriter) Flush() error {
	if len(t.tail) == 0 {
		return nil
	}
	tail := t.tail
	t.tail = nil
	_, err := io.WriteString(t.w, printableText(string(tail)))
	return err
}

// completeUpTo returns how much of b ends on a character boundary: all
// of it, unless it ends with the start of a multi-byte character whose
// other bytes have not come yet.
func completeUpTo(b []byte) int {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax+1; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return i
			}
			break
		}
	}
	return len(b)
}

// printJSON writes v as indented JSON, with every character that could
// act on a terminal written as a \u escape (see above).
func (a *App) printJSON(v any) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return err
	}
	_, err := a.Out.Write(jsonPrintable(buf.Bytes()))
	return err
}

// jsonPrintable escapes, in encoding/json's output, the characters it
// leaves raw that ledger.Printable escapes (DEL, C1, the bidirectional
// formatting characters). They can only be inside strings, where \uXXXX
// means the same character, so the JSON decodes to the same values.
func jsonPrintable(b []byte) []byte {
	var out []byte
	start := 0
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r >= 0x7f && ledger.Printable(string(r)) != string(r) {
			if out == nil {
				out = make([]byte, 0, len(b)+16)
			}
			out = append(out, b[start:i]...)
			out = fmt.Appendf(out, `\u%04x`, r)
			start = i + n
		}
		i += n
	}
	if out == nil {
		return b
	}
	return append(out, b[start:]...)
}

// printLines writes "name  value" lines, each value made safe.
func printLines(w io.Writer, lines [][]string) {
	for _, l := range lines {
		fmt.Fprintf(w, "%-13s %s\n", l[0], safe(l[1]))
	}
}
