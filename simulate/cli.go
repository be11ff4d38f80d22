package simulate

import (
	"flag"
	"fmt"
	"strings"
)

// Validate rejects the values Run would refuse, so that a command line can
// say they are usage errors rather than runtime failures.
func (cfg Config) Validate() error {
	if cfg.Dialect != DialectCBC && cfg.Dialect != DialectClaude {
		return fmt.Errorf("--dialect must be cbc or claude, not %q", cfg.Dialect)
	}
	known := false
	for _, s := range Scenarios() {
		known = known || s == cfg.Scenario
	}
	if !known {
		return fmt.Errorf("--scenario must be one of %s, not %q", strings.Join(Scenarios(), ", "), cfg.Scenario)
	}
	if cfg.Speed < 0 {
		return fmt.Errorf("--speed must not be negative")
	}
	if cfg.Agents < 3 {
		return fmt.Errorf("--agents must be at least 3")
	}
	if cfg.Noise < 0 || cfg.InterruptAfter < 0 {
		return fmt.Errorf("--noise and --interrupt-after must not be negative")
	}
	return nil
}

// IgnoreCLIFlags accepts, and ignores, the flags the agent SDKs pass to the
// CLI they start (Claude Agent SDK: --output-format stream-json --verbose
// --input-format stream-json ...; CodeBuddy: --setting-sources ...), so that
// an SDK can start the simulator as its CLI with no script in between.
func IgnoreCLIFlags(fs *flag.FlagSet) {
	const note = "accepted for CLI compatibility and ignored"
	for _, name := range []string{"p", "print", "verbose", "include-partial-messages", "continue", "dangerously-skip-permissions"} {
		fs.Bool(name, false, note)
	}
	for _, name := range []string{"input-format", "output-format", "setting-sources", "model", "fallback-model", "permission-mode",
		"allowedTools", "allowed-tools", "disallowedTools", "disallowed-tools", "max-turns", "resume", "session-id",
		"append-system-prompt", "system-prompt", "mcp-config", "permission-prompt-tool", "add-dir", "settings"} {
		fs.String(name, "", note)
	}
}
