package safetext

import (
	"errors"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want error
	}{
		{"plain", "pvc-1234", nil},
		{"accents and CJK are fine", "données-データ", nil},
		{"space is fine", "a b", nil},
		{"empty", "", ErrEmpty},
		{"too long", strings.Repeat("a", 65), ErrTooLong},
		{"invalid UTF-8", "a\xffb", ErrUTF8},
		{"NUL", "a\x00b", ErrControl},
		{"newline", "a\nb", ErrControl},
		{"DEL", "a\x7fb", ErrControl},
		{"C1 NEL", "a\u0085b", ErrControl},
		{"C1 CSI", "a\u009bb", ErrControl},
		{"right-to-left override", "txt.\u202Eexe", ErrFormat},
		{"left-to-right isolate", "a\u2066b", ErrFormat},
		{"zero width space", "a\u200Bb", ErrFormat},
		{"zero width joiner", "a\u200Db", ErrFormat},
		{"byte order mark", "\uFEFFa", ErrFormat},
		{"soft hyphen", "a\u00ADb", ErrFormat},
		{"line separator", "a\u2028b", ErrFormat},
		{"paragraph separator", "a\u2029b", ErrFormat},
		{"non-character", "a\uFFFEb", ErrFormat},
		{"replacement character", "a\uFFFDb", ErrFormat},
		{"tag character", "a\U000E0041b", ErrFormat},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Check(tc.in, 64)
			if tc.want == nil && got != nil || tc.want != nil && !errors.Is(got, tc.want) {
				t.Fatalf("Check(%q) = %v, want %v", tc.in, got, tc.want)
			}
			if got != nil && strings.Contains(got.Error(), tc.in) && tc.in != "" {
				t.Errorf("error %q echoes the value", got)
			}
		})
	}
}

func FuzzCheck(f *testing.F) {
	for _, s := range []string{"a", "a\u202Eb", "\x00", "\xff", "données"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if Check(s, 1<<20) != nil {
			return
		}
		for _, r := range s {
			if Unsafe(r) {
				t.Fatalf("Check accepted %q holding unsafe rune %U", s, r)
			}
		}
	})
}

func TestIsWord(t *testing.T) {
	for _, tc := range []struct {
		s, extra string
		want     bool
	}{
		{"", "", true},
		{"abcXYZ019", "", true},
		{"a-b", "", false},
		{"a-b", "-", true},
		{"a_b.c:d@e", "-_.:@", true},
		{"a/b", "-_.:@", false},
		{"é", "", false},      // letters outside ASCII
		{"١٢٣", "", false},    // digits outside ASCII
		{"a b", "-", false},   // space
		{"a\x00b", "", false}, // control
	} {
		if got := IsWord(tc.s, tc.extra); got != tc.want {
			t.Errorf("IsWord(%q, %q) = %v, want %v", tc.s, tc.extra, got, tc.want)
		}
	}
}

func TestEscape(t *testing.T) {
	for in, want := range map[string]string{
		"bucket does not exist":              "bucket does not exist",
		"":                                   "",
		"line one\nline two\tend\r":          `line one\nline two\tend\r`,
		"\x1b[31mred\x1b[0m":                 `\x1b[31mred\x1b[0m`,
		"evil\u202eexe.txt":                  `evil\u202eexe.txt`,
		"zero\u200bwidth\ufeff":              `zero\u200bwidth\ufeff`,
		"bad \xff\xfe byte":                  `bad \xff\xfe byte`,
		"c1 \u0085 next":                     `c1 \x85 next`,
		"unicode é 日本 stays":                 "unicode é 日本 stays",
		"sep\u2028para\u2029":                `sep\u2028para\u2029`,
		"a replacement char \ufffd is valid": `a replacement char \ufffd is valid`,
	} {
		got := Escape(in)
		if got != want {
			t.Errorf("Escape(%q) = %q, want %q", in, got, want)
		}
		if CheckRunes(got) != nil && got != "" {
			t.Errorf("Escape(%q) = %q still holds unsafe runes: %v", in, got, CheckRunes(got))
		}
	}
}
