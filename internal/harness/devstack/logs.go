package devstack

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// escapeControls makes one log line safe to print: control characters
// (C0, DEL, C1; a NUL decoded from a request's "%00", a newline or an
// escape sequence in a value) and bytes that are not UTF-8 become Go-style
// escapes (\x00, \n, \x1b, \u0085, \xff), so a line can neither be split
// nor rewrite the terminal. Everything else, non-ASCII text included,
// passes as it is.
func escapeControls(s string) string {
	clean := true
	for _, r := range s {
		if isControl(r) || r == utf8.RuneError {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x80 && isControl(r):
			fmt.Fprintf(&b, `\x%02x`, r)
		case isControl(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0x9f) }
