// Package safetext is the one check of untrusted strings shared by every request field the
// driver accepts (CSI fields, volume attributes, mount options, target paths, secrets): a
// string that passes can be logged, written into a file or a unit property, and shown to a
// user without being able to change how it reads.
package safetext

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Errors returned by Check; each says what is wrong, never echoes the value.
var (
	ErrEmpty   = errors.New("is empty")
	ErrTooLong = errors.New("is longer")
	ErrUTF8    = errors.New("is not valid UTF-8")
	ErrControl = errors.New("contains control characters (C0/C1, newline, tab, ...)")
	ErrFormat  = errors.New("contains invisible Unicode format or separator characters (bidirectional overrides, zero-width characters, line/paragraph separators, ...)")
)

// Check returns nil when s is non-empty, at most maxLen bytes, valid UTF-8, and holds no rune
// that Unsafe reports. Errors wrap one of the sentinels above.
func Check(s string, maxLen int) error {
	switch {
	case s == "":
		return ErrEmpty
	case len(s) > maxLen:
		return fmt.Errorf("%w than %d bytes", ErrTooLong, maxLen)
	case !utf8.ValidString(s):
		return ErrUTF8
	}
	return CheckRunes(s)
}

// CheckRunes reports the first class of unsafe rune in s (see Unsafe), nil when there is none.
// It does not check length or emptiness.
func CheckRunes(s string) error {
	if !utf8.ValidString(s) {
		return ErrUTF8
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return ErrControl
		}
		if Unsafe(r) {
			return ErrFormat
		}
	}
	return nil
}

// Unsafe reports whether r is a control character (C0, C1, DEL) or a rune that changes how
// text around it reads without being visible: Unicode format characters (category Cf: the
// bidirectional overrides U+202A-U+202E and isolates U+2066-U+2069, zero-width U+200B-U+200F,
// U+FEFF, ...), line and paragraph separators (Zl, Zp), and non-characters/surrogates that
// valid UTF-8 cannot hold anyway.
func Unsafe(r rune) bool {
	return unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || unicode.Is(unicode.Zl, r) || unicode.Is(unicode.Zp, r) ||
		r == utf8.RuneError || strings.ContainsRune("\uFFFE\uFFFF", r)
}

// IsWord reports whether s holds only ASCII letters, ASCII digits and runes of extra: the
// shape of identifiers (pod UIDs, option names, interface names) that end up in names, paths
// or command lines. The empty string is a word; callers check length themselves.
func IsWord(s, extra string) bool {
	for _, r := range s {
		if !isASCIIAlnum(r) && !strings.ContainsRune(extra, r) {
			return false
		}
	}
	return true
}

func isASCIIAlnum(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
}

// Escape returns s fit to quote in an error, a log or an Event when a less trusted party wrote
// it (mount-s3's output, a Mountpoint Pod's mount.err): every rune Unsafe reports (newlines
// and tabs included) becomes a Go escape (\n, \t, \x1b, \u202e), and every byte that is not
// valid UTF-8 becomes \xNN. The result is one line that reads as it prints: no terminal escape
// sequence, reordering or invisible character reaches kubectl or a log viewer. A backslash
// stays as it is, so an escape is not told from the same characters typed: enough for text
// shown to people, not for text parsed back.
func Escape(s string) string {
	clean := true
	for _, r := range s {
		if Unsafe(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\r':
			b.WriteString(`\r`)
		case Unsafe(r) && r < 0x100:
			fmt.Fprintf(&b, `\x%02x`, r)
		case Unsafe(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
		i += size
	}
	return b.String()
}
