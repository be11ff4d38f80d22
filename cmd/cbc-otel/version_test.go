package main

import (
	"bytes"
	"os"
	"os/exec"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/cbc-otel/cbc-otel/internal/testbin"
)

func TestResolveVersion(t *testing.T) {
	vcs := func(rev, modified string) *debug.BuildInfo {
		return &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: modified}}}
	}
	for _, tc := range []struct {
		name, linked string
		bi           *debug.BuildInfo
		want         string
	}{
		{"linked wins", "v0.9.0-3-gabc", &debug.BuildInfo{Main: debug.Module{Version: "v1.0.0"}}, "v0.9.0-3-gabc"},
		{"go install @version", "dev", &debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}}, "v1.2.3"},
		{"checkout, clean", "dev", vcs("0123456789abcdef0123", "false"), "devel+0123456789ab"},
		{"checkout, dirty", "dev", vcs("0123456789abcdef0123", "true"), "devel+0123456789ab-dirty"},
		{"no VCS", "dev", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "dev"},
		{"no build info", "dev", nil, "dev"},
	} {
		if got := resolveVersion(tc.linked, tc.bi); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// `version` and cbc_otel_build_info say the same, for a binary built as
// make build does (the version linked in) and as go build does.
func TestVersionAgreesWithBuildInfo(t *testing.T) {
	linked := t.TempDir() + "/cbc-otel"
	linked, err := testbin.Build(t.Context(), linked, testbin.LDFlags("-X main.version=v9.8.7-test"))
	if err != nil {
		t.Fatal(err)
	}
	for _, bin := range []struct{ path, want string }{{linked, "v9.8.7-test"}, {wrapperBin, ""}} {
		out, err := exec.Command(bin.path, "version").Output()
		if err != nil {
			t.Fatal(err)
		}
		v := strings.TrimPrefix(strings.TrimSpace(string(out)), "cbc-otel ")
		if v == "" || (bin.want != "" && v != bin.want) {
			t.Errorf("%s version = %q, want %q", bin.path, v, bin.want)
		}
		mf := t.TempDir() + "/m.prom"
		cmd := exec.Command(bin.path, "replay", "--metrics-file", mf, "-")
		cmd.Stdin = strings.NewReader("")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("replay: %v\n%s", err, out)
		}
		b, err := os.ReadFile(mf)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(b, []byte(`cbc_otel_build_info{`)) || !bytes.Contains(b, []byte(`version="`+v+`"`)) {
			t.Errorf("%s: build_info does not carry version %q:\n%s", bin.path, v, b)
		}
	}
}
