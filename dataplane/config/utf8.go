package config

import (
	"fmt"
	"unicode/utf8"
)

// CheckUTF8 reports where data stops being UTF-8, by line and column
// (1-based, in bytes). YAML and JSON are UTF-8, and a credential with other
// bytes could not survive the config's JSON round trip (the ConfigMap the
// operator writes), so such a file is refused before it is decoded, with
// the place to look rather than the YAML parser's "invalid leading UTF-8
// octet". Parse calls it; adapters of other formats call it on their input
// for the same error.
func CheckUTF8(data []byte) error {
	if utf8.Valid(data) {
		return nil
	}
	line, col := 1, 1
	for i := 0; i < len(data); {
		r, n := utf8.DecodeRune(data[i:])
		if r == utf8.RuneError && n <= 1 {
			return fmt.Errorf("line %d, column %d: not valid UTF-8 (a config is UTF-8 text; a credential must be a UTF-8 string)", line, col)
		}
		if data[i] == '\n' {
			line, col = line+1, 1
		} else {
			col += n
		}
		i += n
	}
	return fmt.Errorf("not valid UTF-8")
}
