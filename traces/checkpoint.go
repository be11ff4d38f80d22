package traces

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/cbc-otel/cbc-otel/ingest"
)

// CheckpointName is the name a Sink's state is saved under in each stream
// of a checkpoint.
const CheckpointName = "traces"

var _ ingest.StreamCheckpointer = (*Sink)(nil)

// streamState is what a Sink remembers between two events, saved with its
// stream: the agents it holds until their run is finalized, and the latest
// run of each task (for the links of child tasks).
type streamState struct {
	// Links are (task id, its latest run id), oldest first.
	Links    [][2]string `json:"links,omitempty"`
	Deferred []deferred  `json:"deferred,omitempty"`
}

// deferred are the agents of one run that ended without both times.
type deferred struct {
	Task   string `json:"task"`
	Run    string `json:"run"`
	Agents []int  `json:"agents"`
}

// SaveStream implements ingest.StreamCheckpointer. open is not needed: the
// Sink keys what it holds by task and run id.
func (s *Sink) SaveStream([]*ingest.Run) (json.RawMessage, error) {
	var st streamState
	for _, task := range s.lastOrder {
		st.Links = append(st.Links, [2]string{task, s.lastRun[task]})
	}
	for k, idx := range s.deferred {
		st.Deferred = append(st.Deferred, deferred{Task: k.task, Run: k.run, Agents: slices.Clone(idx)})
	}
	if len(st.Links) == 0 && len(st.Deferred) == 0 {
		return nil, nil
	}
	slices.SortFunc(st.Deferred, func(a, b deferred) int {
		return cmp.Or(cmp.Compare(a.Task, b.Task), cmp.Compare(a.Run, b.Run))
	})
	b, err := json.Marshal(st)
	if err != nil {
		return nil, fmt.Errorf("traces: encoding the stream state: %w", err)
	}
	return b, nil
}

// RestoreStream implements ingest.StreamCheckpointer, on a Sink that has
// seen no event yet. The commit gives the Sink back what it held: the runs
// exported later link and nest as they would have without the restart.
// Deferred agents of a run that is not open are dropped (nothing would ever
// export or free them). With no saved state (tracing was off when the
// checkpoint was written) the Sink learns what open tells: the open runs,
// for links.
func (s *Sink) RestoreStream(state json.RawMessage, open []*ingest.Run) (func(), error) {
	if len(state) == 0 {
		return func() {
			for _, r := range open {
				s.remember(r)
			}
		}, nil
	}
	var st streamState
	if err := json.Unmarshal(state, &st); err != nil {
		return nil, fmt.Errorf("traces: decoding the stream state: %w", err)
	}
	isOpen := make(map[runKey]bool, len(open))
	for _, r := range open {
		isOpen[runKey{r.TaskID, r.RunID}] = true
	}
	return func() {
		for _, l := range st.Links {
			if l[0] != "" {
				s.remember(&ingest.Run{TaskID: l[0], RunID: l[1]})
			}
		}
		for _, d := range st.Deferred {
			if k := (runKey{d.Task, d.Run}); isOpen[k] && len(d.Agents) > 0 {
				s.deferred[k] = append(s.deferred[k], d.Agents...)
			}
		}
	}, nil
}
