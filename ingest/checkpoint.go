package ingest

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
)

// TrackerState is everything a Tracker holds between two events, in a form
// that encodes to JSON: the runs not yet finalized (with the bookkeeping that
// makes every lifecycle event fire once), the tombstones of finalized runs
// and the clock. A sidecar checkpoints it next to the stream offset it
// belongs to, so that after a restart the Tracker continues exactly where
// the checkpoint left it: a run already counted is not counted again (its
// RunFinished and AgentEnded events do not fire twice), a run still open is
// not lost.
//
// Snapshots are only meaningful at a line boundary: the Pipeline's framer
// state (a partial line) is not part of it, so take them when the bytes fed
// so far end with a newline.
type TrackerState struct {
	// Now is the Tracker's clock when the snapshot was taken, epoch ms.
	Now int64 `json:"now"`
	// Runs are the unfinalized runs in order of appearance.
	Runs []RunSnapshot `json:"runs"`
	// Tombstones are the (task id, run id) of finalized runs still
	// remembered, oldest first.
	Tombstones [][2]string `json:"tombstones,omitempty"`
	// Launchers are what the last finalized run of each task remembered
	// left for the runs that name it later, oldest first (nested.go).
	Launchers []AgentRef `json:"launchers,omitempty"`
	// Sessions are the cost baselines of the sessions seen, least
	// recently used first (see Turn). A checkpoint of an older version has
	// none: each session's next result then counts in full, once.
	Sessions []SessionSnapshot `json:"sessions,omitempty"`
}

// RunSnapshot is one unfinalized run: its exported fields plus what the
// Tracker keeps private.
type RunSnapshot struct {
	Run Run `json:"run"`
	// GraceEnd is when the run's grace window closes (finished runs only),
	// on the Tracker's clock.
	GraceEnd int64 `json:"grace_end,omitempty"`
	// AgentsStarted and AgentsEnded are the indices of the agents whose
	// AgentStarted and AgentEnded events were emitted already.
	AgentsStarted []int `json:"agents_started,omitempty"`
	AgentsEnded   []int `json:"agents_ended,omitempty"`
	// AnnounceBy is set while an adopted run's RunStarted is held back
	// (see Tracker.adopt), on the Tracker's clock.
	AnnounceBy int64 `json:"announce_by,omitempty"`
}

// Snapshot returns a deep copy of the Tracker's state. It must be called
// from the goroutine that feeds the Tracker.
func (t *Tracker) Snapshot() TrackerState { return t.snapshot(true, nil) }

// SnapshotShared is Snapshot without the deep copy: the runs share their
// agents, phases and costs with the Tracker's, so it is valid only until
// the Tracker is next fed, advanced or closed. For a caller that encodes it
// at once: serve's checkpoint takes one of every stream each second, and
// copying every run in its grace window for it (~6,000 with 256 busy
// streams) was a sixth of serve's allocation. The runs are appended to
// runs[:0], reusing its array: a caller snapshotting stream after stream
// passes the previous snapshot's Runs (nil when it had none: keep the
// array then).
func (t *Tracker) SnapshotShared(runs []RunSnapshot) TrackerState {
	clear(runs)
	return t.snapshot(false, runs[:0])
}

func (t *Tracker) snapshot(deep bool, runs []RunSnapshot) TrackerState {
	s := TrackerState{Now: t.now, Runs: runs}
	var sent []int // shared runs' agent indices, in one array
	for _, r := range t.open {
		if r.Finalized {
			continue
		}
		rs := RunSnapshot{Run: *r}
		if deep {
			rs.Run = r.Clone()
		}
		if r.Finished {
			rs.GraceEnd = r.graceEnd
		}
		rs.AnnounceBy = r.announceBy
		if deep {
			for i := range r.Agents {
				a := &r.Agents[i]
				if a.startSent {
					rs.AgentsStarted = append(rs.AgentsStarted, a.Index)
				}
				if a.endSent {
					rs.AgentsEnded = append(rs.AgentsEnded, a.Index)
				}
			}
		} else {
			rs.AgentsStarted, sent = agentIndices(sent, r.Agents, func(a *Agent) bool { return a.startSent })
			rs.AgentsEnded, sent = agentIndices(sent, r.Agents, func(a *Agent) bool { return a.endSent })
		}
		s.Runs = append(s.Runs, rs)
	}
	for _, k := range t.tombOrder {
		s.Tombstones = append(s.Tombstones, [2]string{k.task, k.run})
	}
	if len(s.Runs) == 0 {
		s.Runs = nil // "runs":null, as ever (a reused array would say [])
	}
	s.Launchers = t.ended.Values()
	s.Sessions = t.sess.Snapshot()
	return s
}

// agentIndices appends to pool the indices of the agents for which sent
// holds and returns them (nil for none) and the grown pool.
func agentIndices(pool []int, agents []Agent, sent func(*Agent) bool) (idx, grown []int) {
	n := len(pool)
	for i := range agents {
		if sent(&agents[i]) {
			pool = append(pool, agents[i].Index)
		}
	}
	if len(pool) == n {
		return nil, pool
	}
	return pool[n:len(pool):len(pool)], pool
}

// Restore loads a snapshot into a Tracker that has seen no event yet. now
// is the caller's clock (epoch ms): the grace windows that were open keep
// the time they had left, so that the time a sidecar was down does not
// close them before the late snapshots written meanwhile are read. A
// replay, whose clock is the stream, passes s.Now. No lifecycle event is
// emitted: the sinks learn of restored runs from their own checkpoints.
// A checkpoint is input too: its text is cleaned as the decoder cleans a
// line's (hygiene.go), so the runs the sinks get from Restore are clean.
func (t *Tracker) Restore(s TrackerState, now int64) error {
	if len(t.open) > 0 || len(t.tombOrder) > 0 || t.ended.Len() > 0 || t.now != 0 || t.sess.Len() > 0 {
		return errors.New("ingest: Restore on a Tracker that is in use")
	}
	s = cleanState(s)
	loadSessions, err := t.sess.Restore(s.Sessions)
	if err != nil {
		return fmt.Errorf("ingest: restoring %w", err)
	}
	shift := int64(0)
	if now > s.Now {
		shift = now - s.Now
	}
	t.now = s.Now + shift
	for i, rs := range s.Runs {
		if rs.Run.TaskID == "" {
			return fmt.Errorf("ingest: restoring run %d: no task id", i)
		}
		if rs.Run.Finalized {
			return fmt.Errorf("ingest: restoring run %d: already finalized", i)
		}
		r := new(Run)
		*r = rs.Run.Clone()
		if r.Finished {
			r.graceEnd = rs.GraceEnd + shift
		}
		for j := range r.Agents {
			a := &r.Agents[j]
			a.startSent = slices.Contains(rs.AgentsStarted, a.Index)
			a.endSent = slices.Contains(rs.AgentsEnded, a.Index)
		}
		t.restartAgentClocks(r)
		t.byTask[r.TaskID] = append(t.byTask[r.TaskID], r)
		t.noteRun(r.TaskID, r.RunID)
		t.open = append(t.open, r)
		if r.Finished {
			t.graceQ = append(t.graceQ, r)
		} else {
			kind := 0
			if r.Workflow {
				kind = 1
			}
			t.unfinished[kind].push(r, t.counts[kind])
			t.counts[kind]++
		}
		if rs.AnnounceBy != 0 && !r.Finished {
			r.announceBy = rs.AnnounceBy + shift
			t.pendingQ = append(t.pendingQ, r)
		}
	}
	slices.SortStableFunc(t.pendingQ, func(a, b *Run) int { return cmp.Compare(a.announceBy, b.announceBy) })
	// Runs finish in clock order, so deadlines were ascending; keep the
	// queue sorted whatever the snapshot said.
	slices.SortStableFunc(t.graceQ, func(a, b *Run) int {
		switch {
		case a.graceEnd < b.graceEnd:
			return -1
		case a.graceEnd > b.graceEnd:
			return 1
		}
		return 0
	})
	for _, k := range s.Tombstones {
		rk := runKey{k[0], k[1]}
		if _, ok := t.tombs[rk]; ok {
			continue
		}
		t.tombs[rk] = true // not saved: a late notification counts as a duplicate, as before
		t.tombOrder = append(t.tombOrder, rk)
		t.noteRun(rk.task, rk.run)
	}
	for len(t.tombOrder) > t.maxTombs {
		delete(t.tombs, t.tombOrder[0])
		t.tombOrder = t.tombOrder[1:]
	}
	for _, ref := range s.Launchers {
		t.stats.launchersEvicted.Add(int64(t.ended.Put(ref.TaskID, ref)))
	}
	loadSessions()
	return nil
}
