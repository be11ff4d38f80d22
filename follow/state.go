package follow

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/cbc-otel/cbc-otel/ingest"
)

// StateFile is the checkpoint's name in the state directory.
const StateFile = "cbc-otel-serve.state.json"

// stateVersion is the checkpoint format version. A file of another version
// is refused like a corrupt one: it is moved aside, every file is read from
// the start and the totals restart from zero (a counter reset). Version 1
// held the metrics' state in fields of its own; version 2 holds every
// sink's state, opaque, under the sink's name.
const stateVersion = 2

// State is the checkpoint: everything a restarted serve needs to go on as if
// it had never stopped. It is one file, written atomically (temp file,
// fsync, rename, fsync of the directory), so that the offsets, the open-run
// state and every sink's state always belong to the same instant.
type State struct {
	Version int `json:"version"`
	// SavedAt is the wall clock of the checkpoint, epoch ms.
	SavedAt int64 `json:"saved_at"`
	// Sinks are the process-wide states of the sinks (e.g. the metrics'
	// cumulative totals and admitted labels), by name: what each
	// ingest.Checkpointer of Options.Checkpointers saved.
	Sinks map[string]json.RawMessage `json:"sinks,omitempty"`
	// Streams are the streams being followed.
	Streams []StreamState `json:"streams"`
	// Finished are files read to their end and finalized that are still on
	// disk (kept, plain, or not yet removed): never read again unless they
	// grow (plain) or are truncated.
	Finished []FileState `json:"finished,omitempty"`
}

// FileState identifies a file across restarts: device and inode, and a hash
// of its first bytes (inodes are reused once a file is deleted).
type FileState struct {
	Path string `json:"path"`
	Dev  uint64 `json:"dev"`
	Ino  uint64 `json:"ino"`
	// FP is the hex SHA-256 of the first FPLen bytes.
	FP    string `json:"fp,omitempty"`
	FPLen int64  `json:"fp_len,omitempty"`
	// Size is the bytes consumed: up to the end of the last complete line.
	Size int64 `json:"offset"`
}

// StreamState is one followed stream at a line boundary.
type StreamState struct {
	FileState
	// Tracker is the open-run state after the line ending at Size.
	Tracker ingest.TrackerState `json:"tracker"`
	// Sinks are what the stream's sinks remember of its open runs, by
	// name: what each ingest.StreamCheckpointer of the stream saved.
	Sinks map[string]json.RawMessage `json:"sinks,omitempty"`
	// LastGrowth is when the file last grew (epoch ms), for the idle
	// timeout.
	LastGrowth int64 `json:"last_growth"`
}

// ErrCorrupt wraps a checkpoint that cannot be used.
var ErrCorrupt = errors.New("corrupt checkpoint")

// LoadState reads the checkpoint in dir. A missing file is an empty state;
// a file that cannot be decoded is ErrCorrupt.
func LoadState(dir string) (State, error) {
	b, err := os.ReadFile(filepath.Join(dir, StateFile))
	if errors.Is(err, fs.ErrNotExist) {
		return State{Version: stateVersion}, nil
	}
	if err != nil {
		return State{}, fmt.Errorf("reading checkpoint: %w", err)
	}
	var s State
	if err := json.Unmarshal(b, &s); err != nil {
		return State{}, fmt.Errorf("%w: %s: %w", ErrCorrupt, filepath.Join(dir, StateFile), err)
	}
	if s.Version != stateVersion {
		return State{}, fmt.Errorf("%w: %s: version %d, want %d", ErrCorrupt, filepath.Join(dir, StateFile), s.Version, stateVersion)
	}
	for i, st := range s.Streams {
		if st.Size < 0 || st.Ino == 0 {
			return State{}, fmt.Errorf("%w: stream %d (%s): bad offset or inode", ErrCorrupt, i, st.Path)
		}
	}
	return s, nil
}

// SaveState writes s to dir atomically: a crash at any point leaves either
// the previous checkpoint or this one, never a mix or a torn file.
func SaveState(dir string, s State) error {
	return writeAtomic(dir, StateFile, func(w io.Writer) error {
		return encodeState(w, s, func(yield func(StreamState) error) error {
			for _, ss := range s.Streams {
				if err := yield(ss); err != nil {
					return err
				}
			}
			return nil
		})
	})
}

// encodeState writes the JSON of s (its Version set to stateVersion) to w
// with the streams that streams yields in place of s.Streams, one at a
// time: a checkpoint of many streams is never held whole in memory, nor
// are all their snapshots at once (with 256 busy streams it is tens of
// MiB, and was most of serve's peak RSS). It decodes as json.Marshal(s)
// with those streams would.
func encodeState(w io.Writer, s State, streams func(yield func(StreamState) error) error) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	enc := json.NewEncoder(bw)
	put := func(prefix string, v any) error {
		if _, err := bw.WriteString(prefix); err != nil {
			return err
		}
		return enc.Encode(v) // (its newline is JSON whitespace)
	}
	err := put(`{"version":`, stateVersion)
	if err == nil {
		err = put(`,"saved_at":`, s.SavedAt)
	}
	if err == nil && len(s.Sinks) > 0 {
		err = put(`,"sinks":`, s.Sinks)
	}
	if err == nil {
		_, err = bw.WriteString(`,"streams":[`)
	}
	first := true
	if err == nil {
		err = streams(func(ss StreamState) error {
			sep := ","
			if first {
				sep, first = "", false
			}
			return put(sep, ss)
		})
	}
	if err == nil {
		_, err = bw.WriteString("]")
	}
	if err == nil && len(s.Finished) > 0 {
		err = put(`,"finished":`, s.Finished)
	}
	if err == nil {
		_, err = bw.WriteString("}")
	}
	if err == nil {
		err = bw.Flush()
	}
	if err != nil {
		return fmt.Errorf("encoding checkpoint: %w", err)
	}
	return nil
}

// writeAtomic writes name in dir through write, atomically.
func writeAtomic(dir, name string, write func(io.Writer) error) error {
	f, err := os.CreateTemp(dir, "."+name+".tmp-*")
	if err != nil {
		return fmt.Errorf("writing checkpoint: %w", err)
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if err := write(f); err != nil {
		return fmt.Errorf("writing checkpoint: %w", err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("syncing checkpoint: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("closing checkpoint: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		return fmt.Errorf("renaming checkpoint: %w", err)
	}
	ok = true
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("syncing state directory: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("syncing state directory: %w", err)
	}
	return nil
}

// CheckStateDir makes sure dir exists and a checkpoint can be written there,
// so that a read-only or missing state directory is an error at start and
// not a silent loss at the first checkpoint.
func CheckStateDir(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("state directory: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("state directory %s: not a directory", dir)
	}
	f, err := os.CreateTemp(dir, ".cbc-otel-probe-*")
	if err != nil {
		return fmt.Errorf("state directory %s is not writable: %w", dir, err)
	}
	name := f.Name()
	f.Close()
	if err := os.Remove(name); err != nil {
		return fmt.Errorf("state directory %s: %w", dir, err)
	}
	return nil
}

// QuarantineCorrupt moves a corrupt checkpoint aside (kept for a post
// mortem) so that the next checkpoint does not overwrite the evidence, and
// returns where it went.
func QuarantineCorrupt(dir string, now time.Time) (string, error) {
	to := filepath.Join(dir, fmt.Sprintf("%s.corrupt-%d", StateFile, now.UnixNano()))
	if err := os.Rename(filepath.Join(dir, StateFile), to); err != nil {
		return "", fmt.Errorf("moving the corrupt checkpoint aside: %w", err)
	}
	return to, nil
}
