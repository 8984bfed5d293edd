package ledger

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// Printable returns s with every character that could act on a terminal,
// break a line, or disguise the text around it written as a visible
// escape:
//
//   - C0 controls and DEL: \n, \r, \t, else \x00 … \x1f, \x7f (ESC is \x1b);
//   - C1 controls (U+0080 … U+009F, CSI among them): \u0080 … \u009f;
//   - the bidirectional formatting characters, which reorder how the text
//     around them is displayed (U+061C, U+200E, U+200F, U+202A … U+202E,
//     U+2066 … U+2069), and the line and paragraph separators U+2028 and
//     U+2029: \u202e and so on;
//   - a byte that is not UTF-8: \xff.
//
// Everything else, non-ASCII letters and the backslash included, is kept
// as it is. So a string without those characters is returned unchanged,
// and Printable(Printable(s)) == Printable(s); the price is that a sender
// who typed a literal `\x1b` and one who sent ESC are stored alike, which
// loses nothing worth keeping from a field nobody signed.
//
// Accept stores every free-text field of a delivery (type, subject,
// delivery id, version hint, attributes) in this form, and webhookctl
// prints text through it.
func Printable(s string) string {
	if isPrintable(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		esc, n := escapeAt(s, i)
		if esc == "" {
			b.WriteString(s[i : i+n])
		} else {
			b.WriteString(esc)
		}
		i += n
	}
	return b.String()
}

// printableWithin is Printable cut to at most n bytes, never inside a
// character or an escape.
func printableWithin(s string, n int) string {
	if isPrintable(s) {
		return truncate(s, n)
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		esc, size := escapeAt(s, i)
		piece := esc
		if piece == "" {
			piece = s[i : i+size]
		}
		if b.Len()+len(piece) > n {
			break
		}
		b.WriteString(piece)
		i += size
	}
	return b.String()
}

// isPrintable reports whether Printable would return s unchanged.
func isPrintable(s string) bool {
	for i := 0; i < len(s); {
		if c := s[i]; c >= 0x20 && c < 0x7f {
			i++
			continue
		}
		esc, n := escapeAt(s, i)
		if esc != "" {
			return false
		}
		i += n
	}
	return true
}

// escapeAt returns the escape of the character (or invalid byte) at s[i],
// "" when it is kept, and its length in bytes.
func escapeAt(s string, i int) (string, int) {
	r, n := utf8.DecodeRuneInString(s[i:])
	switch {
	case r == utf8.RuneError && n <= 1:
		return `\x` + hex2(s[i]), 1
	case r == '\n':
		return `\n`, n
	case r == '\r':
		return `\r`, n
	case r == '\t':
		return `\t`, n
	case r < 0x20 || r == 0x7f:
		return `\x` + hex2(byte(r)), n
	case needsEscape(r):
		return `\u` + hex4(r), n
	}
	return "", n
}

// needsEscape: the characters at or above U+0080 that Printable escapes.
func needsEscape(r rune) bool {
	switch {
	case r >= 0x80 && r <= 0x9f: // C1 controls
		return true
	case r == 0x061c, r == 0x200e, r == 0x200f: // Arabic letter mark, LRM, RLM
		return true
	case r >= 0x202a && r <= 0x202e: // LRE, RLE, PDF, LRO, RLO
		return true
	case r >= 0x2066 && r <= 0x2069: // LRI, RLI, FSI, PDI
		return true
	case r == 0x2028 || r == 0x2029: // line and paragraph separators
		return true
	}
	return false
}

func hex2(b byte) string {
	s := strconv.FormatUint(uint64(b), 16)
	if len(s) < 2 {
		s = "0" + s
	}
	return s
}

func hex4(r rune) string {
	s := strconv.FormatUint(uint64(r), 16)
	return strings.Repeat("0", max(0, 4-len(s))) + s
}
