// Package ghoutput writes step outputs in the format of GitHub Actions'
// $GITHUB_OUTPUT file, and reads that format back the way the runner does
// (actions/runner, EnvFileKeyValuePairs): one output per `name=value`
// line, or `name<<DELIMITER`, the value's lines, and a line that is the
// delimiter alone. Empty lines between outputs are skipped.
//
// The runner reads lines on LF (and on CRLF on Windows), so a value with
// either in it, or any text that did not come from us, is written in the
// heredoc form under a delimiter drawn from crypto/rand and checked not to
// occur in the value: no value can end its own output early and start
// another.
package ghoutput

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Output is one step output.
type Output struct {
	Name  string
	Value string
	// Untrusted marks a value holding text we did not write (names from
	// the stream): it is always written in the heredoc form, even on one
	// line.
	Untrusted bool
}

// ValidName reports whether name is a name GitHub accepts for an output
// and its expressions can read (steps.<id>.outputs.<name>): a letter or
// _, then letters, digits, - and _.
func ValidName(name string) bool {
	if name == "" {
		return false
	}
	for i, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r == '_':
		case i > 0 && (r >= '0' && r <= '9' || r == '-'):
		default:
			return false
		}
	}
	return true
}

// maxDelimiterTries bounds the draws of a delimiter that the value does
// not contain: with 128 random bits a second draw is already a wonder, so
// running out says the random source is broken.
const maxDelimiterTries = 8

// Write writes outs to w in one write, each in the form it needs: the
// heredoc form for an untrusted value or one with a CR or LF, else
// name=value. random is where delimiters come from (nil: crypto/rand). It
// starts with a newline, which the runner skips, so that a file whose
// last output lacks its newline does not run into ours.
func Write(w io.Writer, outs []Output, random io.Reader) error {
	if random == nil {
		random = rand.Reader
	}
	var b strings.Builder
	b.WriteString("\n")
	for _, o := range outs {
		if !ValidName(o.Name) {
			return fmt.Errorf("output name %q: want a letter or _, then letters, digits, - or _", o.Name)
		}
		if !o.Untrusted && !strings.ContainsAny(o.Value, "\r\n") {
			b.WriteString(o.Name + "=" + o.Value + "\n")
			continue
		}
		delim, err := delimiter(o.Value, random)
		if err != nil {
			return fmt.Errorf("output %s: %w", o.Name, err)
		}
		b.WriteString(o.Name + "<<" + delim + "\n" + o.Value + "\n" + delim + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// delimiter draws a heredoc delimiter that does not occur in value.
func delimiter(value string, random io.Reader) (string, error) {
	var buf [16]byte
	for range maxDelimiterTries {
		if _, err := io.ReadFull(random, buf[:]); err != nil {
			return "", fmt.Errorf("drawing a delimiter: %w", err)
		}
		d := "ghadelimiter_" + hex.EncodeToString(buf[:])
		if !strings.Contains(value, d) {
			return d, nil
		}
	}
	return "", errors.New("no delimiter drawn is absent from the value")
}

// Parse reads text as the runner reads $GITHUB_OUTPUT on Linux, returning
// the outputs in file order (a name set twice appears twice; the runner
// keeps the last). It fails where the runner fails: a line neither form,
// an empty name or delimiter, a heredoc never closed.
func Parse(text string) ([]Output, error) {
	var outs []Output
	for len(text) > 0 {
		line, rest, _ := strings.Cut(text, "\n")
		text = rest
		if line == "" {
			continue
		}
		eq, hd := strings.Index(line, "="), strings.Index(line, "<<")
		if eq >= 0 && (hd < 0 || eq < hd) {
			outs = append(outs, Output{Name: line[:eq], Value: line[eq+1:]})
			continue
		}
		if hd < 0 {
			return outs, fmt.Errorf("invalid format %q", line)
		}
		name, delim := line[:hd], line[hd+2:]
		if name == "" || delim == "" {
			return outs, fmt.Errorf("invalid format %q: empty name or delimiter", line)
		}
		var value []string
		for {
			if text == "" {
				return outs, fmt.Errorf("output %s: delimiter %q not found", name, delim)
			}
			l, rest, nl := strings.Cut(text, "\n")
			text = rest
			if l == delim {
				break
			}
			if !nl {
				return outs, fmt.Errorf("output %s: the value's last line has no newline", name)
			}
			value = append(value, l)
		}
		outs = append(outs, Output{Name: name, Value: strings.Join(value, "\n")})
	}
	return outs, nil
}
