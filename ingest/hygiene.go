package ingest

import (
	"github.com/cbc-otel/cbc-otel/cost"
	"github.com/cbc-otel/cbc-otel/safetext"
	"github.com/cbc-otel/cbc-otel/streamjson"
)

// Text hygiene: ingest is the one boundary. Every text a Run, Agent, Phase,
// AgentRef, ModelCall or Turn carries to a sink passed safetext.Clean once,
// to its field's bound: the decoder cleans what a line says, join cleans
// the CLI's telemetry attributes (ModelCall's text), and Restore cleans
// what a checkpoint says, here. The sinks only safetext.Cut it.

func cleanID(s string) string   { return safetext.Clean(s, streamjson.MaxIDLen) }
func cleanName(s string) string { return safetext.Clean(s, streamjson.MaxNameLen) }

// cleanRun cleans the text of a run read from a checkpoint to the bounds
// the decoder keeps.
func cleanRun(r *Run) {
	for _, p := range []*string{&r.TaskID, &r.RunID, &r.SessionID, &r.ToolUseID, &r.ParentTaskID, &r.TaskType,
		&r.PatchStatus, &r.Reason} {
		*p = cleanID(*p)
	}
	r.Name = cleanName(r.Name)
	r.Description = safetext.Clean(r.Description, streamjson.MaxTextLen)
	r.Error = safetext.Clean(r.Error, streamjson.MaxTextLen)
	r.Summary = safetext.Clean(r.Summary, streamjson.MaxPreviewLen)
	cleanRef(&r.Parent)
	if r.ParentLink != nil {
		ref := *r.ParentLink
		cleanRef(&ref)
		r.ParentLink = &ref
	}
	if r.Resumes != nil {
		ref := *r.Resumes
		cleanRef(&ref)
		r.Resumes = &ref
	}
	cleanModels(r.Cost.Models)
	for i := range r.Phases {
		r.Phases[i].Title = cleanName(r.Phases[i].Title)
	}
	for i := range r.Agents {
		a := &r.Agents[i]
		a.AgentID = cleanID(a.AgentID)
		a.Label = cleanName(a.Label)
		a.PhaseTitle = cleanName(a.PhaseTitle)
		a.Error = safetext.Clean(a.Error, streamjson.MaxTextLen)
		a.ResultPreview = safetext.Clean(a.ResultPreview, streamjson.MaxPreviewLen)
		a.PromptPreview = safetext.Clean(a.PromptPreview, streamjson.MaxPreviewLen)
		cleanModels(a.Cost.Models)
	}
}

// cleanRef cleans what a run remembers of another.
func cleanRef(ref *AgentRef) {
	for _, p := range []*string{&ref.TaskID, &ref.RunID, &ref.AgentID, &ref.RootTask, &ref.RootRun} {
		*p = cleanID(*p)
	}
	ref.Workflow = cleanName(ref.Workflow)
	ref.Label = cleanName(ref.Label)
}

// cleanModels cleans model names in place (the slice is the caller's own).
func cleanModels(ms []cost.Model) {
	for i := range ms {
		ms[i].Model = cleanID(ms[i].Model)
	}
}

// cleanState returns a copy of s whose text is clean, s left as it was.
func cleanState(s TrackerState) TrackerState {
	c := s
	c.Runs = make([]RunSnapshot, len(s.Runs))
	for i, rs := range s.Runs {
		rs.Run = rs.Run.Clone()
		cleanRun(&rs.Run)
		c.Runs[i] = rs
	}
	c.Tombstones = make([][2]string, len(s.Tombstones))
	for i, k := range s.Tombstones {
		c.Tombstones[i] = [2]string{cleanID(k[0]), cleanID(k[1])}
	}
	c.Launchers = append([]AgentRef(nil), s.Launchers...)
	for i := range c.Launchers {
		cleanRef(&c.Launchers[i])
	}
	c.Sessions = make([]SessionSnapshot, len(s.Sessions))
	for i, ss := range s.Sessions {
		ss.ID = cleanID(ss.ID)
		ss.Models = append([]cost.SessionModel(nil), ss.Models...)
		for j := range ss.Models {
			ss.Models[j].Model.Model = cleanID(ss.Models[j].Model.Model)
		}
		c.Sessions[i] = ss
	}
	return c
}
