// Package follow is the engine of `cbc-otel serve`: it follows files (spool
// files written by `cbc-otel run --spool.dir`, or the CLI's stdout written
// by tee), runs one ingest pipeline per file into one shared set of sinks,
// and checkpoints offsets, open runs and the sinks' state so that a
// restart, even after kill -9, counts every run exactly once.
//
// The engine knows no sink: each stream's pipeline comes from
// Options.NewStream, and what the sinks must remember across a restart is
// theirs to encode, through the ingest.Checkpointer (process-wide, e.g. the
// metrics' cumulative totals) and ingest.StreamCheckpointer (per stream,
// e.g. the metrics' marks of open runs, the traces' deferred agents)
// interfaces; the engine stores their opaque states under their names.
//
// # One goroutine
//
// Every stream is read, and every pipeline fed, from the goroutine running
// Engine.Run. The sinks therefore never see two pipelines at once (the
// traces sink is not safe for that), and a checkpoint taken between two
// reads is consistent by construction: the totals it saves are exactly the
// effects of the bytes before the offsets it saves.
//
// # Exactly once across a crash
//
// A checkpoint holds, at one instant: per stream the offset of the end of
// the last complete line fed and the Tracker's state after that line (open
// runs, which agents were reported ended, which runs were reported
// finished), what the stream's sinks remember of those runs, and the
// sinks' process-wide state (for the metrics: the cumulative cbc_* counter
// and histogram totals). A restarted engine restores every sink (the
// metrics' totals become the base of its /metrics), restores each Tracker
// and re-reads from each offset. Restoring is all or nothing: no sink
// changes before every piece of the checkpoint decoded cleanly (see
// ingest.Checkpointer), so an unusable checkpoint still falls back to a
// clean start. Every count made before the
// checkpoint is in the base and is not made again, because the restored
// Tracker knows it was reported (a finished run does not finish twice, an
// ended agent does not end twice); every count made after it was lost with
// the crashed process and is made again from the bytes, which are still in
// the file (spool files are only removed after a checkpoint that records
// them finished). So the totals of the restarted process are exactly those
// of a process that never crashed. Spans of runs that were open at the
// crash are exported when those runs end, with the same deterministic ids;
// spans exported after the last checkpoint may be exported a second time
// with the same ids, which backends merge.
package follow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cbc-otel/cbc-otel/ingest"
	"github.com/cbc-otel/cbc-otel/spool"
)

// Defaults of Options.
const (
	DefaultIdleTimeout     = 5 * time.Minute
	DefaultPoll            = 250 * time.Millisecond
	DefaultCheckpointEvery = 5 * time.Second
	// DefaultMaxStreams bounds the files followed at once: each holds an
	// open descriptor and a pipeline, so a directory of a million files
	// must not become a million of each.
	DefaultMaxStreams = 256
	// readBudget bounds what one stream reads per cycle, so that a large
	// backlog in one file does not starve the others.
	readBudget = 4 << 20
	// terminalGap is the least time between two checkpoints written
	// because a run ended (CheckpointEvery if shorter). A crash loses no
	// count either way (the bytes after a checkpoint are read again); it
	// bounds the spans exported a second time after one.
	terminalGap = time.Second
)

// Reasons a stream is finalized (label values).
const (
	ReasonComplete = "complete" // a spool file marked complete, read to its end
	ReasonIdle     = "idle"     // no growth for the idle timeout
	ReasonDeleted  = "deleted"  // unlinked while followed, read to its end
	ReasonVanished = "vanished" // gone while serve was down
)

// Options configures an Engine.
type Options struct {
	// Globs select the files to follow (filepath.Glob patterns). Names
	// ending in .cbcspool.open / .cbcspool are spool files; others plain.
	Globs []string
	// StateDir holds the checkpoint; "" runs without one (a restart then
	// starts every file from the beginning).
	StateDir string
	// IdleTimeout finalizes a plain file, or a spool file never marked
	// complete (its wrapper was killed), after this long without growth.
	IdleTimeout time.Duration
	// Poll is how often the files are checked for growth: those written
	// since the last check with change notification (inotify), every file
	// without.
	Poll time.Duration
	// Sweep is how often, with change notification, the globs are
	// expanded and every file is checked all the same (a safety net, and
	// the clock of idle timeouts and grace windows of quiet streams); 0
	// means DefaultSweep.
	Sweep time.Duration
	// NoNotify polls every file every Poll, without change notification.
	NoNotify bool
	// CheckpointEvery is the longest time between checkpoints while data
	// flows; a checkpoint is also written after a cycle in which a run
	// reached a terminal state (at most one a second), and when a stream
	// is finalized.
	CheckpointEvery time.Duration
	// Keep keeps spool files once processed (they are removed otherwise).
	Keep bool
	// MaxSpoolBytes caps the spool files on disk: past it, processed files
	// kept by Keep, then complete files not yet started, are removed oldest
	// first and counted. 0 means no cap.
	MaxSpoolBytes int64
	// MaxStreams caps the files followed at once; matching files beyond it
	// wait, in glob order (oldest first for spool files, whose names start
	// with their creation time), until followed ones are finalized. 0
	// means DefaultMaxStreams.
	MaxStreams int
	// NewStream returns what a new stream is made of. It is called for
	// every stream followed, restored ones included. Required.
	NewStream func() StreamConfig
	// Checkpointers are the sinks' process-wide states, checkpointed under
	// their names (e.g. the metrics' cumulative totals).
	Checkpointers map[string]ingest.Checkpointer
	// Registerer receives the engine's own metrics; nil registers nothing.
	Registerer prometheus.Registerer
	Logger     *slog.Logger
	// Now is the wall clock; nil means time.Now.
	Now func() time.Time
}

// StreamConfig is what one followed stream is made of.
type StreamConfig struct {
	// Pipeline configures the stream's pipeline: its sinks (e.g. a metrics
	// sink shared by every stream, a traces sink of its own), Stats, grace,
	// line cap, decode options. The engine sets Live and Now (its clock)
	// and adds a sink of its own (it checkpoints soon after a run ends).
	Pipeline ingest.PipelineOptions
	// Checkpointers are the sinks whose memory of the stream's open runs
	// is checkpointed with it, under their names. A sink shared by every
	// stream is given each stream's open runs in turn.
	Checkpointers map[string]ingest.StreamCheckpointer
}

// Engine follows files into pipelines. Build it with New, call Restore,
// then Run.
type Engine struct {
	opts     Options
	log      *slog.Logger
	streams  map[fileID]*stream
	finished map[fileID]FileState
	warned   map[string]bool
	buf      []byte
	// snapRuns is the array each stream's checkpoint snapshot reuses;
	// cleared after a checkpoint so that it holds no run past it.
	snapRuns []ingest.RunSnapshot
	ready    atomic.Bool

	terminal       bool // a run reached a terminal state since the checkpoint
	dirty          bool // offsets moved since the checkpoint
	lastCheckpoint time.Time
	checkpointErr  error

	// Cycles of Run: full ones (every file) and those of the written
	// files only (change notification); for the tests.
	fullCycles, writtenCycles int

	mStreams    prometheus.Gauge
	mFinalized  *prometheus.CounterVec
	mEvicted    prometheus.Counter
	mEvictedB   prometheus.Counter
	mCkpt       prometheus.Counter
	mCkptErr    prometheus.Counter
	mTruncated  prometheus.Counter
	mGapRecords prometheus.Counter
	mWaiting    prometheus.Gauge
}

// New checks opts and builds an Engine.
func New(opts Options) (*Engine, error) {
	if len(opts.Globs) == 0 {
		return nil, errors.New("follow: no files to follow")
	}
	for _, g := range opts.Globs {
		if _, err := filepath.Match(g, ""); err != nil {
			return nil, fmt.Errorf("follow: pattern %q: %w", g, err)
		}
	}
	if opts.NewStream == nil {
		return nil, errors.New("follow: NewStream is required")
	}
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = DefaultIdleTimeout
	}
	if opts.Poll <= 0 {
		opts.Poll = DefaultPoll
	}
	if opts.CheckpointEvery <= 0 {
		opts.CheckpointEvery = DefaultCheckpointEvery
	}
	if opts.Sweep <= 0 {
		opts.Sweep = DefaultSweep
	}
	if opts.MaxStreams < 0 {
		return nil, errors.New("follow: MaxStreams must not be negative")
	}
	if opts.MaxStreams == 0 {
		opts.MaxStreams = DefaultMaxStreams
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	e := &Engine{
		opts:     opts,
		log:      opts.Logger,
		streams:  make(map[fileID]*stream),
		finished: make(map[fileID]FileState),
		warned:   make(map[string]bool),
		buf:      make([]byte, 256<<10),
		mStreams: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "cbc_otel_follow_streams", Help: "Files being followed by serve."}),
		mFinalized: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cbc_otel_follow_streams_finalized_total",
			Help: "Followed streams finalized, by reason (complete, idle, deleted, vanished)."}, []string{"reason"}),
		mEvicted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cbc_otel_spool_evicted_total", Help: "Spool files removed to keep the spool under --spool.max-bytes."}),
		mEvictedB: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cbc_otel_spool_evicted_bytes_total", Help: "Bytes of spool files removed to keep the spool under --spool.max-bytes."}),
		mCkpt: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cbc_otel_checkpoints_total", Help: "Checkpoints written."}),
		mCkptErr: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cbc_otel_checkpoint_errors_total", Help: "Checkpoints that could not be written."}),
		mTruncated: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cbc_otel_follow_truncations_total", Help: "Followed files that shrank (truncated) and were read again from the start."}),
		mGapRecords: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cbc_otel_spool_gaps_total", Help: "Gap records read from spool files (the wrapper lost tapped bytes)."}),
		mWaiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "cbc_otel_follow_files_waiting", Help: "Matching files not followed yet because --follow.max-files are followed already."}),
	}
	for _, r := range []string{ReasonComplete, ReasonIdle, ReasonDeleted, ReasonVanished} {
		e.mFinalized.WithLabelValues(r)
	}
	if opts.Registerer != nil {
		for _, c := range []prometheus.Collector{e.mStreams, e.mFinalized, e.mEvicted, e.mEvictedB, e.mCkpt, e.mCkptErr, e.mTruncated, e.mGapRecords, e.mWaiting} {
			if err := opts.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("follow: registering metrics: %w", err)
			}
		}
	}
	return e, nil
}

// Ready reports that the state is restored and the followers run.
func (e *Engine) Ready() bool { return e.ready.Load() }

// NotReady says why the engine is not ready, for /readyz: the state is
// still being restored, or a directory it is to follow does not exist
// (nothing is read there until it does). nil when ready.
func (e *Engine) NotReady() error {
	if !e.ready.Load() {
		return errors.New("restoring the checkpoint")
	}
	var missing []string
	for _, g := range e.opts.Globs {
		d := filepath.Dir(g)
		if fi, err := os.Stat(d); (err != nil || !fi.IsDir()) && !slices.Contains(missing, d) {
			missing = append(missing, d)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("no such directory to follow: %s", strings.Join(missing, ", "))
	}
	return nil
}

func (e *Engine) nowMs() int64 { return e.opts.Now().UnixMilli() }

// terminalSink notes that a checkpoint is due soon: a run's count changed.
type terminalSink struct{ e *Engine }

func (t terminalSink) Observe(l ingest.Lifecycle) {
	switch l.Kind {
	case ingest.RunFinished, ingest.TaskEnded, ingest.RunFinalized:
		t.e.terminal = true
	}
}

// newStream builds a stream around an open file with a fresh pipeline.
func (e *Engine) newStream(f *os.File, path string, id fileID) *stream {
	cfg := e.opts.NewStream()
	opts := cfg.Pipeline
	opts.Live = true
	opts.Now = e.opts.Now
	opts.Tracker.Sinks = append(slices.Clone(opts.Tracker.Sinks), terminalSink{e})
	s := &stream{
		path: path, id: id, kind: spool.KindOf(path), f: f,
		pipe: ingest.NewPipeline(opts), ckpt: cfg.Checkpointers,
		lastGrowth: e.nowMs(), onRecord: e.onRecord,
	}
	s.rd = spool.NewReader(s.kind, s)
	// A complete spool file (found so, or renamed while serve was down and
	// restored from a checkpoint) is finalized once read to its end.
	s.complete = s.kind == spool.Done
	return s
}

func (e *Engine) onRecord(s *stream, r spool.Record) {
	switch r.Kind {
	case spool.RecordHeader:
		if r.Version > spool.Version && !e.warned[s.path] {
			e.warned[s.path] = true
			e.log.Warn("spool file of a newer format; reading what this version understands", "file", s.path, "version", r.Version)
		}
	case spool.RecordGap:
		// (The Reader drops what the gap left of a line.)
		e.mGapRecords.Inc()
		s.pipe.Stats().AddDropped(r.Source, r.Dropped)
	}
}

// Restore loads the checkpoint (if any), restores every sink's state and
// every stream it holds. A corrupt checkpoint (undecodable, of another
// version, or one whose sink or Tracker state does not restore) is moved
// aside and logged: every file is then read from the start and the totals
// restart from zero (a counter reset, which Prometheus handles), so nothing
// is counted twice within the new totals. Only an unreadable state
// directory is an error.
func (e *Engine) Restore() error {
	if e.opts.StateDir == "" {
		return nil
	}
	st, err := LoadState(e.opts.StateDir)
	if errors.Is(err, ErrCorrupt) {
		e.corrupt(err)
		return nil
	}
	if err != nil {
		return fmt.Errorf("follow: %w", err)
	}
	if err := e.apply(st); err != nil {
		e.corrupt(err)
	}
	return nil
}

func (e *Engine) corrupt(err error) {
	to, qerr := QuarantineCorrupt(e.opts.StateDir, e.opts.Now())
	e.log.Error("checkpoint unusable: reading every followed file from the start; totals restart from zero (a counter reset)",
		"err", err, "moved_to", to, "move_err", qerr)
	for id, s := range e.streams {
		s.f.Close()
		delete(e.streams, id)
	}
	clear(e.finished)
	// No sink was changed: apply commits nothing unless all restored.
}

// apply restores a decoded checkpoint. Nothing reaches the sinks before
// every sink state and every stream restored cleanly, so a bad entry can
// still fall back to a clean start. Sink states saved under a name no sink
// has now are ignored; a sink without a saved state is restored from nil.
func (e *Engine) apply(st State) error {
	var commits []func()
	for _, name := range slices.Sorted(maps.Keys(e.opts.Checkpointers)) {
		commit, err := e.opts.Checkpointers[name].RestoreCheckpoint(st.Sinks[name])
		if err != nil {
			return fmt.Errorf("%w: sink %s: %w", ErrCorrupt, name, err)
		}
		commits = append(commits, commit)
	}
	type restored struct {
		s  *stream
		ss StreamState
	}
	var ok []restored
	fail := func(s *stream, err error) error {
		if s.f != nil {
			s.f.Close()
		}
		for _, r := range ok {
			if r.s.f != nil {
				r.s.f.Close()
			}
		}
		return err
	}
	now := e.nowMs()
	for _, ss := range st.Streams {
		f, path, id, found := e.locate(ss.FileState)
		s := e.newStream(f, path, id)
		if !found {
			s.path, s.kind = ss.Path, spool.KindOf(ss.Path)
			s.complete = s.kind == spool.Done
		}
		if err := s.pipe.Tracker().Restore(ss.Tracker, now); err != nil {
			return fail(s, fmt.Errorf("%w: stream %s: %w", ErrCorrupt, ss.Path, err))
		}
		open := s.pipe.Tracker().Open()
		for _, name := range slices.Sorted(maps.Keys(s.ckpt)) {
			commit, err := s.ckpt[name].RestoreStream(ss.Sinks[name], open)
			if err != nil {
				return fail(s, fmt.Errorf("%w: stream %s: sink %s: %w", ErrCorrupt, ss.Path, name, err))
			}
			commits = append(commits, commit)
		}
		s.rd.Reset(ss.Size)
		s.fp, s.fpLen = ss.FP, ss.FPLen
		ok = append(ok, restored{s, ss})
	}
	// Committed: from here on the sinks know the restored state.
	for _, commit := range commits {
		commit()
	}
	for _, fs := range st.Finished {
		e.finished[fileID{fs.Dev, fs.Ino}] = fs
	}
	for _, r := range ok {
		if r.s.f == nil {
			e.log.Warn("followed file gone while serve was down; its open runs are abandoned", "file", r.ss.Path, "open_runs", len(r.ss.Tracker.Runs))
			e.finalize(r.s, ReasonVanished)
			continue
		}
		e.streams[r.s.id] = r.s
		e.log.Info("resuming stream", "file", r.s.path, "offset", r.s.offset(), "open_runs", len(r.ss.Tracker.Runs))
	}
	e.mStreams.Set(float64(len(e.streams)))
	return nil
}

// locate finds the file a checkpointed stream was reading: at its path, at
// its spool name after completion, or anywhere the globs match (rotated).
func (e *Engine) locate(fs FileState) (*os.File, string, fileID, bool) {
	cands := []string{fs.Path}
	if spool.KindOf(fs.Path) != spool.Plain {
		stem := filepath.Join(filepath.Dir(fs.Path), spool.Stem(filepath.Base(fs.Path)))
		cands = append(cands, stem+spool.DoneSuffix, stem+spool.OpenSuffix)
	}
	for _, g := range e.opts.Globs {
		m, _ := filepath.Glob(g)
		cands = append(cands, m...)
	}
	for _, p := range cands {
		f, err := os.Open(p)
		if err != nil {
			continue
		}
		fi, err := f.Stat()
		if err != nil {
			f.Close()
			continue
		}
		id, ok := idOf(fi)
		if ok && fi.Size() >= fs.Size && matches(f, p, id, fs) {
			return f, p, id, true
		}
		f.Close()
	}
	return nil, fs.Path, fileID{fs.Dev, fs.Ino}, false
}

// Run follows until ctx ends, then reads what is already written (lines in
// flight), writes a final checkpoint and returns. Open runs stay open: they
// continue after a restart. The error is the last checkpoint failure, if
// the final checkpoint failed too.
//
// Every Poll, a cycle reads the files: with change notification (inotify)
// only those written since the last cycle, and every file every Sweep or
// when something else changed in the directories; without it (or past the
// watch limit), every file every cycle.
func (e *Engine) Run(ctx context.Context) error {
	n := e.startNotify()
	defer n.close()
	t := time.NewTicker(e.opts.Poll)
	defer t.Stop()
	sweepTicks := max(1, int(e.opts.Sweep/e.opts.Poll))
	full, ticks := true, 0
	for {
		var busy bool
		if full {
			busy = e.cycle()
			ticks = 0
			if n != nil {
				clear(n.written)
				n.full = false
			}
		} else {
			busy = e.cycleWritten(n)
		}
		e.ready.Store(true)
		if ctx.Err() != nil {
			break
		}
		if busy {
			full = true // a stream hit its read budget: go on at once
			continue
		}
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		ticks++
		if n == nil && ticks >= sweepTicks {
			n = e.startNotify() // a watch that failed may work now
		}
		if n != nil {
			n.drain()
		}
		full = n == nil || n.full || ticks >= sweepTicks
	}
	e.ready.Store(false)
	for _, s := range e.sorted() {
		e.read(s)
	}
	if e.opts.StateDir == "" {
		return nil
	}
	return e.checkpoint()
}

func (e *Engine) sorted() []*stream {
	out := make([]*stream, 0, len(e.streams))
	for _, s := range e.streams {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].path < out[j].path })
	return out
}

// cycle discovers files, reads every stream, finalizes the ended ones and
// checkpoints when due. busy reports that some stream hit its read budget.
func (e *Engine) cycle() (busy bool) {
	e.fullCycles++
	e.discover()
	now := e.nowMs()
	for _, s := range e.sorted() {
		busy = e.visit(s, now) || busy
	}
	e.endCycle()
	return busy
}

// cycleWritten is a cycle of the streams whose files n saw written only;
// a written file that is not followed (new, waiting, grown again) makes it
// a full cycle.
func (e *Engine) cycleWritten(n *notifier) (busy bool) {
	if len(n.written) == 0 {
		return false
	}
	var todo []*stream
	for _, s := range e.sorted() {
		if n.written[filepath.Clean(s.path)] {
			todo = append(todo, s)
		}
	}
	if len(todo) < len(n.written) {
		return e.cycle()
	}
	clear(n.written)
	e.writtenCycles++
	now := e.nowMs()
	for _, s := range todo {
		busy = e.visit(s, now) || busy
	}
	e.endCycle()
	return busy
}

// visit checks and reads one stream, ticks its pipeline and finalizes it
// when it ended. It reports that the stream hit its read budget.
func (e *Engine) visit(s *stream, now int64) (busy bool) {
	e.check(s)
	n := e.read(s)
	s.pipe.Tick()
	switch {
	case n == 0 && s.complete:
		e.finalize(s, ReasonComplete)
	case n == 0 && s.gone:
		e.finalize(s, ReasonDeleted)
	case n == 0 && s.kind != spool.Done && now-s.lastGrowth >= e.opts.IdleTimeout.Milliseconds():
		e.finalize(s, ReasonIdle)
	}
	return n >= readBudget
}

// endCycle updates the gauge and checkpoints when due.
func (e *Engine) endCycle() {
	e.mStreams.Set(float64(len(e.streams)))
	if e.opts.StateDir != "" && e.checkpointDue() {
		_ = e.checkpoint()
	}
}

// warnOnce logs msg once per key.
func (e *Engine) warnOnce(key, msg string, args ...any) {
	if !e.warned[key] {
		e.warned[key] = true
		e.log.Warn(msg, args...)
	}
}

// checkpointDue reports that a checkpoint is to be written this cycle:
// CheckpointEvery after the last one while offsets move, or, once a run
// ended, terminalGap after the last one (a checkpoint of every busy stream
// costs tens of ms: with runs ending in some stream every cycle, one per
// cycle was most of serve's CPU).
func (e *Engine) checkpointDue() bool {
	since := e.opts.Now().Sub(e.lastCheckpoint)
	return (e.terminal && since >= min(terminalGap, e.opts.CheckpointEvery)) ||
		(e.dirty && since >= e.opts.CheckpointEvery)
}

// read reads a stream up to the budget.
func (e *Engine) read(s *stream) int {
	n, err := s.readSome(e.buf, readBudget)
	if n > 0 {
		s.lastGrowth = e.nowMs()
		e.dirty = true
	}
	if err != nil && !e.warned["read:"+s.path] {
		e.warned["read:"+s.path] = true
		e.log.Warn("reading a followed file failed; retrying", "file", s.path, "err", err)
	}
	return n
}

// check looks at a stream's file: unlinked, truncated, marked complete,
// renamed.
func (e *Engine) check(s *stream) {
	fi, err := s.f.Stat()
	if err != nil {
		return
	}
	if s.kind == spool.Open && !s.complete {
		// A live wrapper refreshes its .open file's mtime while its child
		// is quiet (spool.Heartbeat): idleness counts from the later of the
		// last growth and the last heartbeat, so only a dead wrapper's file
		// goes idle.
		if mt := fi.ModTime().UnixMilli(); mt > s.lastGrowth {
			s.lastGrowth = min(mt, e.nowMs())
		}
	}
	if nlink(fi) == 0 && !s.gone {
		s.gone = true
		e.log.Info("followed file deleted; reading it to its end, then finalizing", "file", s.path)
	}
	if fi.Size() < s.rd.Pos() {
		// Truncated (copytruncate, or > file): what is there now is new,
		// and the partial line read before belongs to nothing.
		e.mTruncated.Inc()
		e.log.Info("followed file truncated; reading it again from the start", "file", s.path, "size", fi.Size(), "was", s.rd.Pos())
		s.rd.Reset(0)
		s.fp, s.fpLen = "", 0
		e.dirty = true
	}
	if s.kind == spool.Open && !s.complete {
		done := filepath.Join(filepath.Dir(s.path), spool.Stem(filepath.Base(s.path))+spool.DoneSuffix)
		if dfi, err := os.Stat(done); err == nil {
			if id, ok := idOf(dfi); ok && id == s.id {
				// Marked complete: the writer synced everything first, so
				// reading to the end now reads the whole stream.
				s.path, s.kind, s.complete = done, spool.Done, true
			}
		}
	}
}

// finalize closes a stream: open runs are abandoned and every run is
// finalized (counted), then the stream is recorded as finished in a
// checkpoint before its file may be removed, so that a crash in between
// neither loses the counts nor reads the file again.
func (e *Engine) finalize(s *stream, reason string) {
	s.pipe.Close()
	e.mFinalized.WithLabelValues(reason).Inc()
	delete(e.streams, s.id)
	e.terminal, e.dirty = true, true
	if s.f == nil {
		return // vanished: nothing on disk to remember
	}
	fs := s.identity()
	s.f.Close()
	e.log.Info("stream finalized", "file", s.path, "reason", reason, "bytes", s.offset())
	if s.gone {
		return
	}
	e.finished[s.id] = fs
	if s.kind == spool.Plain || e.opts.Keep {
		return
	}
	if s.kind == spool.Open {
		// Never marked complete, and neither written nor touched by its
		// wrapper's heartbeat for the idle timeout: the wrapper died. The
		// file is kept all the same (a wrapper that was only stalled may
		// still write to it: it is then followed again from here).
		e.log.Warn("spool file never marked complete and silent for --follow.idle-timeout: its wrapper is presumably dead; finalized, kept on disk",
			"file", s.path, "idle_timeout", e.opts.IdleTimeout)
		return
	}
	if e.opts.StateDir != "" {
		if err := e.checkpoint(); err != nil {
			return // keep the file: the counts are not durable yet
		}
	}
	e.remove(s.id, s.path)
}

// remove deletes a processed spool file and forgets it.
func (e *Engine) remove(id fileID, path string) {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		e.log.Warn("removing a processed spool file failed", "file", path, "err", err)
		return
	}
	delete(e.finished, id)
}

// candidate is a file the globs matched.
type candidate struct {
	path string
	fi   os.FileInfo
	id   fileID
}

// discover expands the globs, enforces the spool cap, and opens the files
// not followed yet.
func (e *Engine) discover() {
	var cands []candidate
	seen := make(map[fileID]bool)
	for _, g := range e.opts.Globs {
		matches, _ := filepath.Glob(g)
		for _, p := range matches {
			fi, err := os.Stat(p)
			if err != nil || !fi.Mode().IsRegular() {
				continue
			}
			id, ok := idOf(fi)
			if !ok || seen[id] {
				continue
			}
			seen[id] = true
			cands = append(cands, candidate{p, fi, id})
		}
	}
	// Forget finished files that are gone, so the list stays as long as
	// what is on disk.
	for id := range e.finished {
		if !seen[id] {
			if _, err := os.Stat(e.finished[id].Path); err != nil {
				delete(e.finished, id)
				e.dirty = true
			}
		}
	}
	cands = e.evict(cands)
	waiting := 0
	for _, c := range cands {
		if s, ok := e.streams[c.id]; ok {
			if s.path != c.path && spool.KindOf(c.path) == spool.Done && s.kind == spool.Open {
				s.path, s.kind, s.complete = c.path, spool.Done, true
			}
			continue
		}
		// Finished files go through open, which mostly skips them: only
		// new ones wait here without a descriptor.
		if _, fin := e.finished[c.id]; !fin && len(e.streams) >= e.opts.MaxStreams {
			waiting++
			continue
		}
		if !e.open(c) {
			waiting++
		}
	}
	e.mWaiting.Set(float64(waiting))
	if waiting > 0 && !e.warned["max-streams"] {
		e.warned["max-streams"] = true
		e.log.Warn("more matching files than --follow.max-files: the rest wait until followed ones end",
			"max_files", e.opts.MaxStreams, "waiting", waiting)
	} else if waiting == 0 {
		delete(e.warned, "max-streams") // warn again at the next episode
	}
}

// open starts following a file, unless it is one finished already. It
// reports false when the file is to be followed but waits for a free slot
// (MaxStreams).
func (e *Engine) open(c candidate) bool {
	f, err := os.Open(c.path)
	if err != nil {
		if !e.warned["open:"+c.path] {
			e.warned["open:"+c.path] = true
			e.log.Warn("cannot open a matched file", "file", c.path, "err", err)
		}
		return true
	}
	start := int64(0)
	// The finished entry is dropped only once the file is followed: one
	// that waits for a slot must not be read again from the start.
	forget := false
	if fs, ok := e.finished[c.id]; ok {
		idleOpen := spool.KindOf(fs.Path) == spool.Open // finalized idle before it was complete
		switch {
		case !matches(f, c.path, c.id, fs) || c.fi.Size() < fs.Size:
			// Another file on a reused inode, or truncated: new content.
			forget = true
		case idleOpen && c.fi.Size() > fs.Size:
			// Its wrapper was alive after all: a new stream from where the
			// last one ended.
			e.log.Warn("a spool file finalized as idle grew again; following it from where it was finalized", "file", c.path, "offset", fs.Size)
			start = fs.Size
			forget = true
		case idleOpen && spool.KindOf(c.path) == spool.Open:
			f.Close() // still silent: kept, not read again
			return true
		case spool.KindOf(c.path) != spool.Plain:
			f.Close()
			if !e.opts.Keep {
				e.remove(c.id, c.path) // processed before a crash, not yet removed
			}
			return true
		case c.fi.Size() == fs.Size:
			f.Close()
			return true
		default:
			// A plain file that grew after its idle finalization: a new
			// stream from where the last one ended.
			start = fs.Size
			forget = true
		}
	}
	if len(e.streams) >= e.opts.MaxStreams {
		// No slot (a finished file grown again): looked at next cycle.
		f.Close()
		return false
	}
	if forget {
		delete(e.finished, c.id)
	}
	s := e.newStream(f, c.path, c.id)
	s.rd.Reset(start)
	e.streams[c.id] = s
	e.dirty = true
	e.log.Info("following", "file", c.path, "kind", kindName(s.kind), "offset", start)
	return true
}

func kindName(k spool.Kind) string {
	switch k {
	case spool.Open:
		return "spool (open)"
	case spool.Done:
		return "spool (complete)"
	}
	return "plain"
}

// evict keeps the spool files under MaxSpoolBytes: first spool files
// already processed and kept, then complete ones not started yet, oldest
// (by name: creation time) first. Files being followed or still written are
// never removed. It returns the candidates left.
func (e *Engine) evict(cands []candidate) []candidate {
	if e.opts.MaxSpoolBytes <= 0 {
		return cands
	}
	var total int64
	var victims []int
	for i, c := range cands {
		if spool.KindOf(c.path) == spool.Plain {
			continue
		}
		total += c.fi.Size()
		_, following := e.streams[c.id]
		_, finished := e.finished[c.id]
		if !following && (spool.KindOf(c.path) == spool.Done || finished) {
			// Complete files, and .open files finalized as idle (their
			// wrapper died), may go.
			victims = append(victims, i)
		}
	}
	if total <= e.opts.MaxSpoolBytes {
		return cands
	}
	rank := func(i int) int {
		if _, ok := e.finished[cands[i].id]; ok {
			return 0
		}
		return 1
	}
	sort.SliceStable(victims, func(a, b int) bool {
		ra, rb := rank(victims[a]), rank(victims[b])
		if ra != rb {
			return ra < rb
		}
		return filepath.Base(cands[victims[a]].path) < filepath.Base(cands[victims[b]].path)
	})
	drop := make(map[int]bool)
	for _, i := range victims {
		if total <= e.opts.MaxSpoolBytes {
			break
		}
		c := cands[i]
		if err := os.Remove(c.path); err != nil {
			continue
		}
		total -= c.fi.Size()
		drop[i] = true
		processed := rank(i) == 0
		delete(e.finished, c.id)
		e.dirty = true
		if !processed {
			e.mEvicted.Inc()
			e.mEvictedB.Add(float64(c.fi.Size()))
			e.log.Warn("spool over --spool.max-bytes: removed a complete spool file before processing it", "file", c.path, "bytes", c.fi.Size())
		}
	}
	if total > e.opts.MaxSpoolBytes && !e.warned["cap"] {
		e.warned["cap"] = true
		e.log.Warn("spool still over --spool.max-bytes: the rest is being written or followed", "bytes", total, "cap", e.opts.MaxSpoolBytes)
	}
	out := cands[:0]
	for i, c := range cands {
		if !drop[i] {
			out = append(out, c)
		}
	}
	return out
}

// checkpoint writes the state now. Each stream's state is taken and
// encoded in turn (see encodeState), so the checkpoint's memory is that of
// one stream, not of all of them.
func (e *Engine) checkpoint() error {
	err := e.saveState()
	if err != nil {
		e.mCkptErr.Inc()
		if e.checkpointErr == nil {
			e.log.Error("writing the checkpoint failed; a restart would re-read from the last good one", "err", err)
		}
		e.checkpointErr = err
		return err
	}
	if e.checkpointErr != nil {
		e.log.Info("checkpoints written again")
	}
	e.checkpointErr = nil
	e.mCkpt.Inc()
	e.terminal, e.dirty = false, false
	e.lastCheckpoint = e.opts.Now()
	return nil
}

// saveState writes the checkpoint: every sink's state, every stream's, the
// finished files.
func (e *Engine) saveState() error {
	st := State{SavedAt: e.nowMs()}
	for name, c := range e.opts.Checkpointers {
		raw, err := c.SaveCheckpoint()
		if err != nil {
			return fmt.Errorf("saving the state of sink %s: %w", name, err)
		}
		st.Sinks = withRaw(st.Sinks, name, raw)
	}
	for _, fs := range e.finished {
		st.Finished = append(st.Finished, fs)
	}
	sort.Slice(st.Finished, func(i, j int) bool { return st.Finished[i].Path < st.Finished[j].Path })
	streams := func(yield func(StreamState) error) error {
		for _, s := range e.sorted() {
			ss, err := e.streamState(s)
			if err == nil {
				err = yield(ss)
			}
			if err != nil {
				return err
			}
		}
		return nil
	}
	err := writeAtomic(e.opts.StateDir, StateFile, func(w io.Writer) error { return encodeState(w, st, streams) })
	clear(e.snapRuns)
	e.snapRuns = e.snapRuns[:0]
	return err
}

// streamState is one stream's part of the checkpoint.
func (e *Engine) streamState(s *stream) (StreamState, error) {
	ts := s.pipe.Tracker().SnapshotShared(e.snapRuns)
	if ts.Runs != nil {
		e.snapRuns = ts.Runs // reused by the next stream's (encoded by then)
	}
	ss := StreamState{FileState: s.identity(), Tracker: ts, LastGrowth: s.lastGrowth}
	open := s.pipe.Tracker().Open()
	for name, c := range s.ckpt {
		raw, err := c.SaveStream(open)
		if err != nil {
			return StreamState{}, fmt.Errorf("saving the state of sink %s for %s: %w", name, s.path, err)
		}
		ss.Sinks = withRaw(ss.Sinks, name, raw)
	}
	return ss, nil
}

// withRaw sets m[name] to a saved state, leaving out an empty one.
func withRaw(m map[string]json.RawMessage, name string, raw json.RawMessage) map[string]json.RawMessage {
	if len(raw) == 0 {
		return m
	}
	if m == nil {
		m = make(map[string]json.RawMessage)
	}
	m[name] = raw
	return m
}
