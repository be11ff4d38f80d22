package exposition

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/push"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

// Push replaces the metrics of the group {job, instance=<hostname>} on the
// Pushgateway at gatewayURL with what g gathers (HTTP PUT), within ctx.
// Basic auth may be given as user:password@ in the URL. Batch runs use it
// on exit: their process is gone before any scrape could see the result.
func Push(ctx context.Context, gatewayURL, job string, g prometheus.Gatherer) error {
	if err := checkPushURL(gatewayURL); err != nil {
		return err
	}
	if job == "" {
		return errors.New("exposition: push: empty job name")
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	// Credentials leave the URL and go into the pusher's basic auth: the
	// pusher puts its URL into error messages, which end up in logs.
	u, _ := url.Parse(gatewayURL)
	user := u.User
	u.User = nil
	p := push.New(u.String(), job).
		Gatherer(g).
		Grouping("instance", host).
		Client(&http.Client{Timeout: 30 * time.Second})
	if user != nil {
		pw, _ := user.Password()
		p = p.BasicAuth(user.Username(), pw)
	}
	if err := p.PushContext(ctx); err != nil {
		return &PushError{URL: redact(gatewayURL), Err: err}
	}
	return nil
}

// PushError is a push the Pushgateway did not take: unreachable, too
// slow, or refused with an HTTP status. It is its own type so that the
// caller can say in one line where the metrics did not go (URL, without
// the password) and why (Err), apart from other failures at exit.
type PushError struct {
	URL string
	Err error
}

func (e *PushError) Error() string { return fmt.Sprintf("exposition: push to %s: %v", e.URL, e.Err) }

func (e *PushError) Unwrap() error { return e.Err }

// checkPushURL accepts absolute http(s) URLs only.
func checkPushURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		// url.Error quotes the whole URL, password included: say less.
		return errors.New("exposition: push gateway URL: not a valid URL")
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("exposition: push gateway URL %q: want http://host:port or https://host:port", redact(s))
	}
	return nil
}

// CheckPushURL reports whether s is usable as a Pushgateway URL, so that
// flag validation fails fast with the same rule Push applies.
func CheckPushURL(s string) error { return checkPushURL(s) }

// redact drops the password of a URL before it goes into an error.
func redact(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "<invalid URL>"
	}
	return u.Redacted()
}

// WriteFile writes what g gathers to path in the Prometheus text format,
// atomically: a temporary file in the same directory is synced and renamed
// over path, so a reader (node_exporter's textfile collector, a CI
// artifact) never sees half a file. A gather error is reported after the
// families that could be gathered are written.
func WriteFile(path string, g prometheus.Gatherer) error {
	mfs, gerr := g.Gather()
	if gerr != nil && len(mfs) == 0 {
		return fmt.Errorf("exposition: gathering: %w", gerr)
	}
	var buf bytes.Buffer
	if err := encodeText(&buf, mfs); err != nil {
		return err
	}
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".tmp*")
	if err != nil {
		return fmt.Errorf("exposition: writing %s: %w", path, err)
	}
	tmp := f.Name()
	_, err = f.Write(buf.Bytes())
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp, 0o644)
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("exposition: writing %s: %w", path, err)
	}
	if gerr != nil {
		return fmt.Errorf("exposition: wrote %s, but gathering was partial: %w", path, gerr)
	}
	return nil
}

func encodeText(buf *bytes.Buffer, mfs []*dto.MetricFamily) error {
	enc := expfmt.NewEncoder(buf, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			return fmt.Errorf("exposition: encoding %s: %w", mf.GetName(), err)
		}
	}
	return nil
}

// WithPrefix returns a Gatherer that keeps only the families of g whose
// name starts with one of prefixes. Pushes use it to send the cbc_* metrics
// without the pushing process's go_* and process_* ones, which mean nothing
// once it has exited.
func WithPrefix(g prometheus.Gatherer, prefixes ...string) prometheus.Gatherer {
	return prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		mfs, err := g.Gather()
		out := mfs[:0]
		for _, mf := range mfs {
			for _, p := range prefixes {
				if strings.HasPrefix(mf.GetName(), p) {
					out = append(out, mf)
					break
				}
			}
		}
		return out, err
	})
}
