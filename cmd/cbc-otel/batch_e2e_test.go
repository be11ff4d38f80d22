// End-to-end tests of the batch paths through the built binary: replay
// --summary.json on every corpus recording, and run --push.gateway (up and down).
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cbc-otel/cbc-otel/streamjson"
)

// `cbc-otel replay --summary.json FILE` prints, for every recording of the corpus,
// exactly the runs written by hand from the recording.
func TestE2EReplayCorpus(t *testing.T) {
	recs, _ := filepath.Glob("../../testdata/corpus/*/*.ndjson")
	n := 0
	for _, rec := range recs {
		if strings.HasSuffix(rec, ".stdin.ndjson") || strings.HasSuffix(rec, ".expected.ndjson") {
			continue
		}
		n++
		want, err := os.ReadFile(strings.TrimSuffix(rec, ".ndjson") + ".expected.ndjson")
		if err != nil {
			t.Fatal(err)
		}
		// With --tracker.capture-errors the error texts are those of the recording;
		// by default each one is withheld, everything else unchanged.
		for _, keep := range []bool{true, false} {
			args := []string{"replay", "--summary.json", "--tracker.capture-errors=" + strconv.FormatBool(keep), rec}
			exp := jsonLines(t, want)
			if !keep {
				withholdErrors(exp)
			}
			out, err := exec.Command(wrapperBin, args...).Output()
			if err != nil {
				t.Fatalf("%v: %v", args, err)
			}
			if got := jsonLines(t, out); !reflect.DeepEqual(got, exp) {
				t.Errorf("%v:\n got %v\nwant %v", args, got, exp)
			}
		}
	}
	if n != 11 { // 5 Claude Code 2.1.328, 2 CodeBuddy, 4 Claude Code 2.1.335 nested
		t.Fatalf("%d recordings, want 11", n)
	}
}

func jsonLines(t *testing.T, b []byte) []any {
	t.Helper()
	var out []any
	for _, l := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		var v any
		if err := json.Unmarshal(l, &v); err != nil {
			t.Fatalf("%v: %s", err, l)
		}
		out = append(out, v)
	}
	return out
}

// A batch job: `run --push.gateway URL --push.job J -- simulate` pushes the
// final metrics when the child exits; with the gateway down the child's
// status is kept and the wrapper still exits promptly.
func TestE2ERunPushGateway(t *testing.T) {
	in := `{"type":"control_request","request_id":"init","request":{"subtype":"initialize"}}` + "\n" +
		`{"type":"user","message":{"role":"user","content":"[[SCENARIO:failed]] go"}}` + "\n"
	run := func(gateway string) (int, time.Duration, string) {
		cmd := exec.Command(wrapperBin, "run", "--web.listen-address=", "--push.gateway", gateway, "--push.job", "ci-nightly",
			"--", wrapperBin, "simulate", "--speed", "0")
		cmd.Stdin = strings.NewReader(in)
		var stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = io.Discard, &stderr
		start := time.Now()
		err := cmd.Run()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatal(err)
		}
		return cmd.ProcessState.ExitCode(), time.Since(start), stderr.String()
	}

	var mu sync.Mutex
	var method, path, body string
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		method, path, body = r.Method, r.URL.Path, string(b)
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	defer gw.Close()
	code, _, stderr := run(gw.URL)
	if code != 0 {
		t.Fatalf("exit %d with the gateway up; stderr:\n%s", code, stderr)
	}
	mu.Lock()
	defer mu.Unlock()
	if method != http.MethodPut || !strings.HasPrefix(path, "/metrics/job/ci-nightly/") {
		t.Errorf("push %s %s, want PUT /metrics/job/ci-nightly/...", method, path)
	}
	if !strings.Contains(body, "cbc_workflow_runs_total") {
		t.Errorf("pushed body lacks cbc_workflow_runs_total (%d bytes)", len(body))
	}

	// A port nobody listens on: the push fails, is logged, changes nothing.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + l.Addr().String()
	l.Close()
	code, took, stderr := run(down)
	if code != 0 {
		t.Errorf("exit %d with the gateway down, want the child's 0", code)
	}
	if !strings.Contains(stderr, "push") {
		t.Errorf("the failed push was not logged:\n%s", stderr)
	}
	if took > 15*time.Second {
		t.Errorf("wrapper took %v with the gateway down", took)
	}
}

// withholdErrors replaces every non-empty "error" value in v (decoded JSON)
// with the text the decoder puts in its place by default.
func withholdErrors(v any) {
	switch v := v.(type) {
	case []any:
		for _, e := range v {
			withholdErrors(e)
		}
	case map[string]any:
		for k, e := range v {
			if s, ok := e.(string); ok && k == "error" && s != "" {
				v[k] = streamjson.WithheldError
				continue
			}
			withholdErrors(e)
		}
	}
}
