package streamjson

import (
	"encoding/json"
	"maps"
	"slices"
)

// MaxResultModels bounds a result line's models (a session uses one to three):
// those beyond, in name order so every line keeps the same, are bad fields.
const MaxResultModels = 16

// maxCostUSD is the largest cost taken as a session's: more is garbage.
const maxCostUSD = 1e6

// modelFields are a modelUsage entry's counts, in ResultModel.Tokens order.
var modelFields = [...]string{"inputTokens", "outputTokens", "cacheReadInputTokens", "cacheCreationInputTokens"}

// result completes a result event on the plain path, which the fast path
// leaves result lines to (one per turn): d.obj holds the line's members.
func (d *Decoder) result(ev *Event) {
	num := func(m map[string]json.RawMessage, name string) int64 {
		f, ok := memberNum(m, name)
		if !ok {
			ev.BadFields++
		}
		return count(f, &ev.BadFields)
	}
	ev.SessionID = cleanID(d.w.str[fSessionID])
	ev.ResultSubtype = Clean(d.w.str[fSubtype], maxIDLen)
	if raw, ok := d.obj["is_error"]; ok && json.Unmarshal(raw, &ev.IsError) != nil {
		ev.BadFields++ // not a bool (null is absent)
	}
	ev.DurationMs = num(d.obj, "duration_ms")
	ev.TotalCostUSD, ev.HasCost = costMember(d.obj, "total_cost_usd", &ev.BadFields)
	var models map[string]json.RawMessage
	if raw, ok := d.obj["modelUsage"]; ok && !isNull(raw) && plainObject(raw, &models) != nil {
		ev.BadFields++
	}
	for _, name := range slices.Sorted(maps.Keys(models)) {
		m := ResultModel{Model: cleanID(name)}
		dup := slices.ContainsFunc(ev.Models, func(o ResultModel) bool { return o.Model == m.Model })
		if len(ev.Models) == MaxResultModels || m.Model == "" || dup || plainObject(models[name], &d.sub) != nil {
			ev.BadFields++
			continue
		}
		for k, field := range modelFields {
			m.Tokens[k] = num(d.sub, field)
		}
		m.CostUSD, _ = costMember(d.sub, "costUSD", &ev.BadFields)
		ev.Models = append(ev.Models, m)
	}
}

// costMember reads a cost in USD, a number in [0, maxCostUSD]; ok is false
// when it is absent or bad (counted in *bad), and it then reads 0.
func costMember(m map[string]json.RawMessage, name string, bad *int) (usd float64, ok bool) {
	f, good := memberNum(m, name)
	if !good || f < 0 || f > maxCostUSD {
		*bad++
		return 0, false
	}
	raw, found := m[name]
	return f, found && !isNull(raw)
}
