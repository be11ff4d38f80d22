package supervise

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"
)

// signalTap is a StdinTap that records what it gets and says when it has
// seen at least want bytes.
type signalTap struct {
	mu   sync.Mutex
	b    bytes.Buffer
	want int
	seen chan struct{}
}

func newSignalTap(want int) *signalTap { return &signalTap{want: want, seen: make(chan struct{})} }

func (s *signalTap) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	before := s.b.Len()
	s.b.Write(p)
	if before < s.want && s.b.Len() >= s.want {
		close(s.seen)
	}
	return len(p), nil
}

func (s *signalTap) bytes() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return bytes.Clone(s.b.Bytes())
}

// await is the answer, or a failure after a failsafe bound.
func await(t *testing.T, ans <-chan []byte) []byte {
	t.Helper()
	select {
	case a := <-ans:
		return a
	case <-time.After(20 * time.Second):
		t.Fatal("no answer: the child did not get the request as a whole line")
		return nil
	}
}

func interruptLine(id string) []byte {
	return []byte(`{"type":"control_request","request_id":"` + id + `","request":{"subtype":"interrupt"}}`)
}

func responseLine(id string) string {
	return `{"type":"control_response","response":{"subtype":"success","request_id":"` + id + `"}}` + "\n"
}

// The SDK writes a long line slowly: the request goes in after its newline,
// never inside it, and the child's answer is kept from stdout and handed
// over; everything else, the echo of the request included, passes.
func TestInjectWaitsForWholeLine(t *testing.T) {
	for _, bufSize := range []int{7, 4096, DefaultBufSize} {
		t.Run(fmt.Sprint(bufSize), func(t *testing.T) {
			cfg := helper(t, "ctl")
			cfg.BufSize = bufSize
			inR, inW := pipe(t)
			out := &lockedBuffer{}
			first := `{"type":"user","text":"` + strings.Repeat("é", 300<<10) + `"}`
			half := len(first) / 2
			intap := newSignalTap(half)
			inj := NewInjector()
			cfg.Stdin, cfg.Stdout, cfg.StdinTap, cfg.Inject = inR, out, intap, inj
			done := make(chan Result, 1)
			go func() {
				res, err := run(t, context.Background(), cfg)
				if err != nil {
					t.Error(err)
				}
				done <- res
			}()
			// The first half of the line, in small writes.
			for i := 0; i < half; i += 1000 {
				if _, err := inW.WriteString(first[i:min(i+1000, half)]); err != nil {
					t.Fatal(err)
				}
			}
			<-intap.seen // the pump is mid-line now
			ans, err := inj.Send(interruptLine("cbc-1"), "cbc-1")
			if err != nil {
				t.Fatal(err)
			}
			select {
			case a := <-ans:
				t.Fatalf("answered before the line ended: %q", a)
			default:
			}
			second := `{"type":"user","text":"two"}` + "\n"
			if _, err := inW.WriteString(first[half:] + "\n" + second); err != nil {
				t.Fatal(err)
			}
			if got := string(await(t, ans)); got != responseLine("cbc-1") {
				t.Errorf("answer %q", got)
			}
			inW.Close()
			res := <-done
			injected := string(interruptLine("cbc-1")) + "\n"
			wantIn := first + "\n" + injected + second
			if got := string(intap.bytes()); got != wantIn {
				t.Errorf("stdin tap: the request is not between whole lines (len %d, want %d)", len(got), len(wantIn))
			}
			// ctl echoes what it read, so stdout is what the child got, less
			// the withheld answer.
			if got := string(out.Bytes()); got != wantIn {
				t.Errorf("stdout: len %d, want %d; the child got the lines out of shape", len(got), len(wantIn))
			}
			if res.StdinBytes != int64(len(wantIn)) || res.StdoutWithheld != int64(len(responseLine("cbc-1"))) {
				t.Errorf("stdin bytes %d (want %d), withheld %d", res.StdinBytes, len(wantIn), res.StdoutWithheld)
			}
		})
	}
}

// The SDK keeps writing lines while the request is sent from another
// goroutine: the request lands whole between two lines, only its answer is
// withheld, and the SDK's own control traffic passes, even an answer to a
// request reusing our id after ours was answered.
func TestInjectConcurrentWithStdin(t *testing.T) {
	cfg := helper(t, "ctl")
	cfg.BufSize = 13 // lines split across reads
	inR, inW := pipe(t)
	out := &lockedBuffer{}
	intap := newSignalTap(1 << 10)
	inj := NewInjector()
	cfg.Stdin, cfg.Stdout, cfg.StdinTap, cfg.Inject = inR, out, intap, inj
	done := make(chan Result, 1)
	go func() {
		res, err := run(t, context.Background(), cfg)
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	var sdk bytes.Buffer
	for i := range 400 {
		fmt.Fprintf(&sdk, `{"type":"user","n":%d,"pad":"%s"}`+"\n", i, strings.Repeat("x", i*37%500))
		if i == 200 {
			sdk.Write(interruptLine("sdk-7"))
			sdk.WriteByte('\n')
		}
	}
	wrote := make(chan error, 1)
	go func() {
		_, err := inW.Write(sdk.Bytes())
		wrote <- err
	}()
	<-intap.seen
	ans, err := inj.Send(interruptLine("cbc-2"), "cbc-2")
	if err != nil {
		t.Fatal(err)
	}
	if got := string(await(t, ans)); got != responseLine("cbc-2") {
		t.Errorf("answer %q", got)
	}
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	// After ours was answered: the same id again is the SDK's business.
	if _, err := inW.Write(append(interruptLine("cbc-2"), '\n')); err != nil {
		t.Fatal(err)
	}
	inW.Close()
	res := <-done

	tapped := string(intap.bytes())
	injected := string(interruptLine("cbc-2")) + "\n"
	at := strings.Index(tapped, injected)
	if at < 0 || (at > 0 && tapped[at-1] != '\n') {
		t.Fatalf("the request is not whole at a line start (at %d)", at)
	}
	wantIn := tapped[:at] + tapped[at+len(injected):]
	if want := sdk.String() + injected; wantIn != want {
		t.Errorf("stdin less the request differs from what the SDK wrote")
	}
	// The child's output: the echo of every line, the answers to sdk-7 and
	// to the second cbc-2 passed, the first cbc-2 answer withheld.
	var want strings.Builder
	for _, l := range strings.SplitAfter(tapped, "\n") {
		want.WriteString(l)
		if strings.HasPrefix(l, `{"type":"control_request"`) {
			id := strings.Split(strings.Split(l, `"request_id":"`)[1], `"`)[0]
			if l == injected && !strings.Contains(want.String()[:want.Len()-len(l)], injected) {
				continue // ours, the first time: withheld
			}
			want.WriteString(responseLine(id))
		}
	}
	if got := string(out.Bytes()); got != want.String() {
		t.Errorf("stdout differs from the echo less our answer (got %d bytes, want %d)", len(got), want.Len())
	}
	if res.StdoutWithheld != int64(len(responseLine("cbc-2"))) {
		t.Errorf("withheld %d", res.StdoutWithheld)
	}
}

// Without stdin, or once it reached EOF, nothing can be injected.
func TestInjectStdinClosed(t *testing.T) {
	t.Run("no stdin", func(t *testing.T) {
		cfg := helper(t, "sigreport")
		inj := NewInjector()
		cfg.Inject = inj
		if _, err := inj.Send(interruptLine("x"), "x"); !errors.Is(err, ErrStdinClosed) {
			t.Errorf("before Run: %v", err)
		}
	})
	t.Run("after EOF", func(t *testing.T) {
		cfg := helper(t, "ctl")
		inj := NewInjector()
		cfg.Inject = inj
		cfg.Stdin = strings.NewReader(`{"a":1}` + "\n")
		if _, err := run(t, context.Background(), cfg); err != nil {
			t.Fatal(err)
		}
		if _, err := inj.Send(interruptLine("x"), "x"); !errors.Is(err, ErrStdinClosed) {
			t.Errorf("after EOF: %v", err)
		}
	})
}

// An Injector that never sends changes not one byte: the round trip of
// every adversarial input is exact.
func TestInjectorIdleByteExact(t *testing.T) {
	for name, in := range adversarial() {
		t.Run(name, func(t *testing.T) {
			cfg := helper(t, "cat")
			var out bytes.Buffer
			cfg.Stdin, cfg.Stdout, cfg.Inject = bytes.NewReader(in), &out, NewInjector()
			res, err := run(t, context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(out.Bytes(), in) || res.StdoutWithheld != 0 {
				t.Errorf("output differs: %d bytes, want %d", out.Len(), len(in))
			}
		})
	}
}

// The stdout filter, armed, withholds exactly the awaited line however the
// stream is split into writes, and passes every other byte.
func TestRespFilterSplits(t *testing.T) {
	ours := responseLine("cbc-9")
	streams := map[string][]string{
		"alone":          {ours},
		"between":        {`{"type":"assistant"}` + "\n", ours, `{"type":"result"}` + "\n"},
		"others first":   {responseLine("sdk-1"), `{"type":"control_response_x"}` + "\n", `{"type":"control_request","request_id":"cbc-9"}` + "\n", ours, ours},
		"partial end":    {ours, `{"type":"control_respon`},
		"keys reordered": {`{"type":"assistant"}` + "\n", `{"response":{"subtype":"success","request_id":"cbc-9"},"type":"control_response"}` + "\n"},
		"near miss":      {`{"type":"control_response","response":{"request_id":"cbc-90"}}` + "\n", ours},
		"long":           {`{"type":"control_response","x":"` + strings.Repeat("y", maxHeld+10) + `"}` + "\n", ours},
	}
	for name, lines := range streams {
		in := strings.Join(lines, "")
		want, wantAns := strings.Replace(in, ours, "", 1), ours
		if name == "keys reordered" {
			want, wantAns = lines[0], lines[1]
		}
		if name == "near miss" || name == "long" {
			want = strings.TrimSuffix(in, ours)
		}
		for _, step := range []int{1, 2, 5, 26, 27, 100, len(in)} {
			var out bytes.Buffer
			j := NewInjector()
			j.dst, j.tap, j.count = io.Discard, func([]byte) bool { return true }, func(int) {}
			ans, err := j.Send(interruptLine("cbc-9"), "cbc-9")
			if err != nil {
				t.Fatal(err)
			}
			f := newRespFilter(&out, j)
			for i := 0; i < len(in); i += step {
				if n, err := f.Write([]byte(in[i:min(i+step, len(in))])); err != nil || n != min(step, len(in)-i) {
					t.Fatalf("%s/%d: write %d, %v", name, step, n, err)
				}
			}
			f.flushHeld()
			if out.String() != want {
				t.Errorf("%s/%d:\n got %q\nwant %q", name, step, out.String(), want)
			}
			select {
			case a := <-ans:
				if string(a) != wantAns {
					t.Errorf("%s/%d: answer %q", name, step, a)
				}
			default:
				t.Errorf("%s/%d: no answer", name, step)
			}
		}
	}
}
