package metrics

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"regexp"
	"strings"
)

// CompileWorkflowAllow compiles the value of --metrics.workflow-allow into
// Options.WorkflowAllow. If value names an existing file, the file holds
// one regexp per line (blank lines and lines starting with # ignored),
// joined as alternatives; otherwise value is itself a regexp. Either way
// the result is anchored: a name is allowed only if the whole of it
// matches ("review" does not allow "review-2").
func CompileWorkflowAllow(value string) (*regexp.Regexp, error) {
	if value == "" {
		return nil, fmt.Errorf("empty regexp")
	}
	expr, err := allowExpr(value)
	if err != nil {
		return nil, err
	}
	return regexp.Compile(`^(?:` + expr + `)$`)
}

// allowExpr returns the unanchored alternatives of value (a file or a
// regexp), each checked on its own so that an error names its line.
func allowExpr(value string) (string, error) {
	fi, err := os.Stat(value)
	if err != nil || fi.IsDir() {
		if _, err := regexp.Compile(value); err != nil {
			return "", err
		}
		return value, nil
	}
	b, err := os.ReadFile(value)
	if err != nil {
		return "", err
	}
	var alts []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, len(b)+1)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if _, err := regexp.Compile(line); err != nil {
			return "", fmt.Errorf("%s:%d: %w", value, n, err)
		}
		alts = append(alts, `(?:`+line+`)`)
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("%s: %w", value, err)
	}
	if len(alts) == 0 {
		return "", fmt.Errorf("%s: no regexp in the file", value)
	}
	return strings.Join(alts, "|"), nil
}
